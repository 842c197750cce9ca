"""Rate limits through the runtime (fake clock): any positive rate runs, and a task
that would wait long for its turn is rescheduled for it instead of sitting
``running`` in a handler slot (issue 9, defect 6)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Policy, Runtime, TaskStatus, ToolContext, tool

calls_at: list[datetime] = []


class Call(BaseModel):
    n: int


@tool(queue="slow_api")
def slow_api(ctx: ToolContext, args: Call) -> None:
    calls_at.append(ctx.clock.now())


def make_runtime(tmp_path: Path, clock: FakeClock, rate: float) -> Runtime:
    policy = Policy.model_validate({"tools": {"slow_api": {"rate_limit_per_second": rate}}})
    return Runtime(
        f"sqlite:///{tmp_path / 'rl.db'}", tools=[slow_api], policies=policy, clock=clock
    )


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    calls_at.clear()
    yield
    calls_at.clear()


def drain_bounded(rt: Runtime) -> None:
    """Drain in a thread: before the fix a rate below 1/s made drain wait forever."""
    t = threading.Thread(target=rt.worker(concurrency=4).drain, daemon=True)
    t.start()
    t.join(15)
    assert not t.is_alive(), "drain never finished: a task waits for a token that never comes"


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_rates_below_one_per_second_run_one_call_per_interval(
    tmp_path: Path, clock: FakeClock, rate: float
) -> None:
    interval = timedelta(seconds=1 / rate)
    rt = make_runtime(tmp_path, clock, rate)
    try:
        start = clock.now()
        ids = [rt.enqueue_action("slow_api", {"n": i}).task_id for i in range(4)]
        drain_bounded(rt)
        assert calls_at == [start]  # one token now; the rest get their turns later
        waiting = [rt.task(i) for i in ids if rt.task(i).status != TaskStatus.SUCCEEDED]
        assert len(waiting) == 3
        # Not running in a handler slot: queued for a reserved turn each, one
        # interval apart (no herd waking at the same instant).
        assert {t.status for t in waiting} == {TaskStatus.QUEUED}
        assert sorted(t.next_attempt_at for t in waiting if t.next_attempt_at) == [
            start + k * interval for k in (1, 2, 3)
        ]
        assert all(t.failures == 0 for t in waiting)  # waiting for a token is no failure
        for _ in range(3):
            clock.advance(interval)
            drain_bounded(rt)
        assert calls_at == [start + k * interval for k in range(4)]
        assert {rt.task(i).status for i in ids} == {TaskStatus.SUCCEEDED}
    finally:
        rt.close()


def test_a_reserved_turn_is_not_taken_twice(tmp_path: Path, clock: FakeClock) -> None:
    """A rescheduled task runs on the turn it reserved; a task enqueued meanwhile
    waits for the next free one instead of jumping in front."""
    rt = make_runtime(tmp_path, clock, 0.5)
    try:
        start = clock.now()
        pair = [rt.enqueue_action("slow_api", {"n": n}).task_id for n in (0, 1)]
        drain_bounded(rt)
        # Handler threads run the two at once: either may take the turn at 0 (no
        # order between them); the other is rescheduled for the next turn.
        assert calls_at == [start]
        ran = [i for i in pair if rt.task(i).status == TaskStatus.SUCCEEDED]
        assert len(ran) == 1
        (second,) = set(pair) - set(ran)
        assert rt.task(second).status == TaskStatus.QUEUED
        assert rt.task(second).next_attempt_at == start + timedelta(seconds=2)
        clock.advance(1)
        late = rt.enqueue_action("slow_api", {"n": 2}).task_id
        drain_bounded(rt)
        assert rt.task(late).next_attempt_at == start + timedelta(seconds=4)
        clock.advance(1)
        drain_bounded(rt)
        assert rt.task(second).status == TaskStatus.SUCCEEDED
        assert rt.task(late).status == TaskStatus.QUEUED
        clock.advance(2)
        drain_bounded(rt)
        assert calls_at == [start + timedelta(seconds=s) for s in (0, 2, 4)]
    finally:
        rt.close()
