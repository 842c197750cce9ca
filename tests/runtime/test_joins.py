"""Joins (issue 13, item 7): ``enqueue(..., after=[a, b])`` runs a task once a and b
have succeeded, decided in their completion transactions; a prerequisite that dies
or is cancelled voids the task that waits on it, naming it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    FakeClock,
    IllegalTransition,
    InvalidArguments,
    PermanentError,
    Runtime,
    TaskNotFound,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.ledger import Tables
from agentq.policies import ApprovalRule, Policy

CALLS: list[str] = []


class Step(BaseModel):
    name: str
    fail: bool = False


@tool(queue="joins")
def step(ctx: ToolContext, args: Step) -> dict[str, Any]:
    if args.fail:
        raise PermanentError(f"{args.name} refused")
    CALLS.append(args.name)
    return {"done": args.name}


@tool(queue="joins")
def gated(ctx: ToolContext, args: Step) -> dict[str, Any]:
    return {"done": args.name}


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    CALLS.clear()
    policy = Policy(approvals=(ApprovalRule(tool="gated"),))
    runtime = Runtime(backend_url, tools=[step, gated], policies=policy, clock=clock)
    yield runtime
    runtime.close()


def _drain(rt: Runtime) -> None:
    rt.worker(receive_timeout=0.05).drain()


def test_a_task_runs_only_once_every_task_it_waits_on_has_succeeded(rt: Runtime) -> None:
    a = rt.enqueue_action("step", {"name": "a"}, delay=60)
    b = rt.enqueue_action("step", {"name": "b"}, delay=120)
    ship = rt.enqueue_action("step", {"name": "ship"}, after=[a, b.task_id])
    assert ship.status is TaskStatus.WAITING
    assert ship.after == ship.waiting_on == [a.task_id, b.task_id]
    assert rt.backend.stats("joins").depth == 2  # the waiting task has no message
    counts = {c.tool: c for c in rt.tool_counts()}["step"]
    assert (counts.waiting, counts.queued) == (1, 2)

    clock: FakeClock = rt.clock  # type: ignore[assignment]
    clock.advance(61)
    _drain(rt)
    assert CALLS == ["a"]
    half = rt.task(ship.task_id)
    assert half.status is TaskStatus.WAITING and half.waiting_on == [b.task_id]

    clock.advance(60)
    _drain(rt)  # b's completion sends ship's message; the same drain runs it
    assert CALLS == ["a", "b", "ship"]
    done = rt.task(ship.task_id)
    assert done.status is TaskStatus.SUCCEEDED and done.waiting_on == []
    assert rt.backend.get_record(Tables.JOINS, a.task_id) is None  # bookkeeping cleared


def test_a_dead_prerequisite_voids_its_waiters_and_theirs(rt: Runtime) -> None:
    paid = rt.enqueue_action("step", {"name": "pay", "fail": True})
    packed = rt.enqueue_action("step", {"name": "pack"})
    ship = rt.enqueue_action("step", {"name": "ship"}, after=[paid, packed])
    notify = rt.enqueue_action("step", {"name": "notify"}, after=[ship])
    _drain(rt)
    voided = rt.task(ship.task_id)
    assert voided.status is TaskStatus.CANCELLED
    assert voided.error is not None and paid.task_id in voided.error and "dead" in voided.error
    chained = rt.task(notify.task_id)
    assert chained.status is TaskStatus.CANCELLED
    assert chained.error is not None and ship.task_id in chained.error
    assert "ship" not in CALLS and "notify" not in CALLS


def test_cancelling_or_rejecting_a_prerequisite_voids_the_waiter(rt: Runtime) -> None:
    a = rt.enqueue_action("step", {"name": "a"}, delay=60)
    w = rt.enqueue_action("step", {"name": "w"}, after=[a])
    rt.cancel(a.task_id, by="ops")
    assert rt.task(w.task_id).status is TaskStatus.CANCELLED

    needs_human = rt.enqueue_action("gated", {"name": "g"})
    assert needs_human.status is TaskStatus.AWAITING_APPROVAL
    w2 = rt.enqueue_action("step", {"name": "w2"}, after=[needs_human])
    assert needs_human.approval_id is not None
    rt.reject(needs_human.approval_id, by="ops", note="no")
    after = rt.task(w2.task_id)
    assert after.status is TaskStatus.CANCELLED and needs_human.task_id in (after.error or "")


def test_a_waiting_task_can_be_cancelled_and_its_prerequisite_still_runs(rt: Runtime) -> None:
    a = rt.enqueue_action("step", {"name": "a"})
    w = rt.enqueue_action("step", {"name": "w"}, after=[a])
    assert rt.cancel(w.task_id).status is TaskStatus.CANCELLED
    _drain(rt)
    assert CALLS == ["a"]
    with pytest.raises(IllegalTransition):
        rt.cancel(w.task_id)


def test_prerequisites_already_succeeded_count_and_the_task_is_sent_at_once(
    rt: Runtime,
) -> None:
    a = rt.enqueue_action("step", {"name": "a"})
    _drain(rt)
    w = rt.enqueue_action("step", {"name": "w"}, after=[a, a])
    assert w.status is TaskStatus.QUEUED
    _drain(rt)
    assert CALLS == ["a", "w"]


def test_bad_prerequisites_are_refused_naming_the_problem(rt: Runtime) -> None:
    with pytest.raises(TaskNotFound, match="no task 'nope' to wait on"):
        rt.enqueue_action("step", {"name": "w"}, after=["nope"])
    dead = rt.enqueue_action("step", {"name": "x", "fail": True})
    _drain(rt)
    with pytest.raises(InvalidArguments, match="is dead: it can never succeed"):
        rt.enqueue_action("step", {"name": "w"}, after=[dead])
    with pytest.raises(InvalidArguments, match="list of task ids"):
        rt.enqueue_action("step", {"name": "w"}, after="abc")  # type: ignore[arg-type]
    with pytest.raises(InvalidArguments, match="task ids"):
        rt.enqueue_action("step", {"name": "w"}, after=[42])  # type: ignore[list-item]
    a = rt.enqueue_action("step", {"name": "a"}, delay=60)
    with pytest.raises(InvalidArguments, match="ordering key"):
        rt.enqueue_action("step", {"name": "w"}, after=[a], ordering_key="k")
    with pytest.raises(InvalidArguments, match="approval"):
        rt.enqueue_action("gated", {"name": "w"}, after=[a])
    with pytest.raises(InvalidArguments, match="at most 100"):
        rt.enqueue_action("step", {"name": "w"}, after=[f"t{i}" for i in range(101)])
    assert [t.tool for t in rt.tasks()].count("step") == 2  # nothing else committed


def test_a_task_may_wait_on_one_enqueued_earlier_in_the_same_transaction(
    rt: Runtime,
) -> None:
    def decide(tx: Any) -> str:
        first = tx.enqueue("step", {"name": "first"})
        return str(tx.enqueue("step", {"name": "second"}, after=[first]).task_id)

    second = rt.transact(decide)
    assert rt.task(second).status is TaskStatus.WAITING
    _drain(rt)
    _drain(rt)
    assert CALLS == ["first", "second"]


def test_a_scheduled_waiter_keeps_its_time_once_released(rt: Runtime) -> None:
    a = rt.enqueue_action("step", {"name": "a"})
    w = rt.enqueue_action("step", {"name": "w"}, after=[a], delay=3600)
    _drain(rt)
    assert rt.task(w.task_id).status is TaskStatus.QUEUED
    assert CALLS == ["a"]
    clock: FakeClock = rt.clock  # type: ignore[assignment]
    clock.advance(3601)
    _drain(rt)
    assert CALLS == ["a", "w"]


# -- two prerequisites completing at once, in two workers -----------------------------


class Gate(BaseModel):
    name: str


BARRIER = threading.Barrier(2, timeout=30)
RACE_CALLS: list[str] = []


@tool(queue="left")
def left(ctx: ToolContext, args: Gate) -> dict[str, str]:
    BARRIER.wait()  # both prerequisites finish together
    return {"done": args.name}


@tool(queue="right")
def right(ctx: ToolContext, args: Gate) -> dict[str, str]:
    BARRIER.wait()
    return {"done": args.name}


@tool(queue="joined")
def joined(ctx: ToolContext, args: Gate) -> dict[str, str]:
    RACE_CALLS.append(ctx.task_id)
    return {"done": args.name}


def test_two_prerequisites_completing_at_once_send_the_waiter_exactly_once(
    tmp_path: Path,
) -> None:
    """Two runtimes (two SQLite connections) over one file, one worker each,
    completing the two prerequisites at the same moment, twelve times."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    tools = [left, right, joined]
    one, two = Runtime(url, tools=tools), Runtime(url, tools=tools)
    RACE_CALLS.clear()
    try:
        waiters = []
        for i in range(12):
            a = one.enqueue_action("left", {"name": f"l{i}"})
            b = one.enqueue_action("right", {"name": f"r{i}"})
            waiters.append(one.enqueue_action("joined", {"name": f"j{i}"}, after=[a, b]).task_id)
            threads = [
                threading.Thread(target=rt.worker(queues=[q], receive_timeout=0.05).drain)
                for rt, q in ((one, "left"), (two, "right"))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not any(t.is_alive() for t in threads)
        one.worker(queues=["joined"], receive_timeout=0.05).drain()
        assert sorted(RACE_CALLS) == sorted(waiters)  # each ran, once
        assert all(one.task(w).status is TaskStatus.SUCCEEDED for w in waiters)
        assert one.backend.stats("joined").depth == 0
    finally:
        one.close()
        two.close()
