"""Task ids: time-ordered for SQLite (page locality), random for Spanner (no hotspot)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from agentq.clock import to_micros
from agentq.ids import new_task_id

_SHAPE = re.compile(r"tsk_[0-9a-f]{32}")


def test_ordered_ids_sort_by_creation_time_and_carry_it() -> None:
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    times = [start + timedelta(microseconds=i) for i in range(0, 5000, 7)]
    ids = [new_task_id(t) for t in times]
    assert all(_SHAPE.fullmatch(i) for i in ids)
    assert ids == sorted(ids)
    assert int(ids[3][4:18], 16) == to_micros(times[3])


def test_ids_of_the_same_microsecond_are_distinct() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    ordered = {new_task_id(now) for _ in range(10_000)}
    random_ids = {new_task_id() for _ in range(10_000)}
    assert len(ordered) == 10_000
    assert len(random_ids) == 10_000
    assert all(_SHAPE.fullmatch(i) for i in random_ids)


def test_random_ids_do_not_follow_time() -> None:
    ids = [new_task_id() for _ in range(200)]
    assert ids != sorted(ids)
