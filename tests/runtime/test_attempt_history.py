"""Every attempt that ends without success is kept in the task's record, for the
console's timeline (issue 28 item 16): when it started and ended, how it ended,
with which error; a delivery whose worker was lost too. Bounded, so a task
throttled all day does not grow without end."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, PermanentError, Runtime, TaskStatus, ToolContext, tool
from agentq.backends import LEASE_SECONDS
from agentq.faults import WorkerCrash
from agentq.ledger import Tables
from agentq.lifecycle.records import ATTEMPT_ERROR_CHARS, ATTEMPTS_KEPT, moved_fields
from agentq.lifecycle.states import Event
from tests.runtime.conftest import REDELIVERED_WITHIN

CALLS: dict[str, int] = {}


class Job(BaseModel):
    ref: str
    fail_times: int = 0
    permanent: bool = False


@tool(queue="work", max_attempts=5)
def job(ctx: ToolContext, args: Job) -> dict[str, Any]:
    CALLS[args.ref] = CALLS.get(args.ref, 0) + 1
    if args.permanent:
        raise PermanentError(f"{args.ref} refused for good")
    if CALLS[args.ref] <= args.fail_times:
        raise RuntimeError(f"{args.ref} failed, call {CALLS[args.ref]}")
    return {"calls": CALLS[args.ref]}


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    CALLS.clear()
    runtime = Runtime(backend_url, tools=[job], clock=clock)
    yield runtime
    runtime.close()


def _history(rt: Runtime, task_id: str) -> list[dict[str, Any]]:
    rec = rt.backend.get_record(Tables.TASKS, task_id) or {}
    return list(rec.get("attempts") or [])


def _drain_until_done(rt: Runtime, clock: FakeClock, task_id: str) -> None:
    for _ in range(10):
        rt.worker(receive_timeout=0.05).drain()
        if rt.task(task_id).done:
            return
        clock.advance(120)  # past any backoff of these few failures
    raise AssertionError(f"task {task_id} did not finish")


def test_failed_attempts_are_kept_with_start_end_outcome_and_error(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("job", {"ref": "two-failures", "fail_times": 2})
    _drain_until_done(rt, clock, task.task_id)
    done = rt.task(task.task_id)
    assert (done.status, done.attempt) == (TaskStatus.SUCCEEDED, 3)
    history = _history(rt, task.task_id)
    assert [(h["attempt"], h["outcome"]) for h in history] == [(1, "retry"), (2, "retry")]
    assert [h["error"] for h in history] == [
        "RuntimeError: two-failures failed, call 1",
        "RuntimeError: two-failures failed, call 2",
    ]
    for h in history:
        assert datetime.fromisoformat(h["started_at"]) <= datetime.fromisoformat(h["ended_at"])
    # The successful attempt is the record's own: nothing more written for it.
    assert done.started_at is not None and done.finished_at is not None
    assert datetime.fromisoformat(history[-1]["ended_at"]) < done.started_at


def test_a_permanent_failure_ends_its_attempt_as_failed(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("job", {"ref": "no", "permanent": True})
    _drain_until_done(rt, clock, task.task_id)
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    [only] = _history(rt, task.task_id)
    assert (only["attempt"], only["outcome"]) == (1, "fail")
    assert only["error"] == "PermanentError: no refused for good"


def test_a_delivery_whose_worker_was_lost_is_kept_as_lost(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("job", {"ref": "crash"})
    rt.faults.arm("after_lease", WorkerCrash())  # claimed, then the worker "dies"
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task.task_id).status == TaskStatus.RUNNING
    clock.advance(LEASE_SECONDS + REDELIVERED_WITHIN)  # lease expiry + backoff
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    [lost] = _history(rt, task.task_id)
    assert (lost["attempt"], lost["delivery"], lost["outcome"]) == (1, 1, "lost")
    assert lost["ended_at"] is None and lost["error"] is None


def test_the_history_keeps_the_latest_attempts_and_cuts_long_errors() -> None:
    now = FakeClock().now()
    rec: dict[str, Any] = {"task_id": "t", "status": TaskStatus.RUNNING, "attempt": 1,
                           "started_at": now.isoformat()}  # fmt: skip
    for n in range(1, ATTEMPTS_KEPT + 6):
        rec = {**rec, **moved_fields(rec, Event.RETRY, now + timedelta(seconds=n),
                                     error="x" * 2000, attempt=n + 1)}  # fmt: skip
        rec["status"] = TaskStatus.RUNNING  # claimed again
    history = rec["attempts"]
    assert len(history) == ATTEMPTS_KEPT
    assert [h["attempt"] for h in history] == list(range(6, ATTEMPTS_KEPT + 6))
    assert {len(h["error"]) for h in history} == {ATTEMPT_ERROR_CHARS}
    # A success ends no entry: the hot path writes nothing more than before.
    assert "attempts" not in moved_fields(rec, Event.SUCCEED, now, result=1)
