"""Task ids: time-ordered for SQLite (page locality), random for Spanner (no hotspot)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

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


def test_ids_of_one_microsecond_follow_each_other_in_the_order_made() -> None:
    # Every task of a transaction shares its time: unordered tails would interleave
    # a decision's thousand tasks with each other's pages; ascending ones keep
    # them in the order they were made, on neighbouring pages.
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    ids = [new_task_id(now) for _ in range(1000)]
    assert ids == sorted(ids)
    assert {i[4:18] for i in ids} == {f"{to_micros(now):014x}"}


def test_ids_of_one_microsecond_are_not_derivable_from_each_other() -> None:
    # An approval's action, expiry, deadline and notification are made in one
    # transaction: holding one id must not name the others (issue 27 item 1:
    # they were the action's tail + 1, + 2, + 3).
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    tails = [int(new_task_id(now)[18:], 16) for _ in range(1000)]
    steps = [b - a for a, b in itertools.pairwise(tails)]
    assert all(step >= 1 for step in steps)
    assert len(set(steps)) > 990  # random steps, not a counter
    assert sum(step < 1 << 32 for step in steps) < 5  # about 48 bits to guess per id


def test_an_earlier_time_gets_its_own_prefix_not_the_previous_ids() -> None:
    # Runtimes with different clocks in one process (a fake clock beside the real
    # one): an id's first digits must still be its own creation time.
    later = datetime(2030, 1, 1, tzinfo=UTC)
    earlier = datetime(2026, 1, 1, tzinfo=UTC)
    new_task_id(later)
    assert int(new_task_id(earlier)[4:18], 16) == to_micros(earlier)


_FORK_SCRIPT = """
import os
from datetime import UTC, datetime, timedelta
from agentq.ids import new_task_id

same = datetime(2026, 12, 2, 15, 0, 0, 1, tzinfo=UTC)
later = same + timedelta(microseconds=1)
new_task_id(same)
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:  # the child: report its two ids and leave at once
    try:
        os.write(write_end, f"{new_task_id(same)} {new_task_id(later)}".encode())
    finally:
        os._exit(0)
os.close(write_end)
with os.fdopen(read_end) as pipe:
    child = pipe.read()
_, status = os.waitpid(pid, 0)
print(child, "|", new_task_id(same), new_task_id(later), "|", status)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_never_makes_its_parents_next_ids() -> None:
    """A child forked after the parent made an id must not count up from the
    parent's last tail (the same microsecond) nor reuse its pool of random bytes
    (a new one): both would give the two processes the same ids.

    The fork happens in a fresh interpreter holding only agentq.ids: forking the
    test worker itself (gRPC, psycopg and browser threads alive) can kill the child
    before it writes a byte, which would test the threads, not the ids."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    child_part, parent_part, status = (part.split() for part in done.stdout.split("|"))
    assert status == ["0"], done.stderr
    assert len(child_part) == 2 and len(parent_part) == 2
    assert all(_SHAPE.fullmatch(i) for i in child_part + parent_part)
    assert child_part[0] != parent_part[0] and child_part[1] != parent_part[1]
