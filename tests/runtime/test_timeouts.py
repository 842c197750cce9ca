"""A hung handler never costs the worker its capacity (defect 5 of issue 9).

A tool call that overruns its timeout is given up: its retry is scheduled, a
sync handler's thread is abandoned and replaced by a fresh one (up to a bound),
and an async handler's task is cancelled on the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Policy, Runtime, TaskStatus, ToolContext, tool
from agentq.executor import Worker
from tests.runtime._drive import REAL_TIMEOUT, advance_until, stop_on_the_fake_clock

RELEASE = threading.Event()  # set only at the end of each test: the hung calls return
ENTERED: list[str] = []
CANCELLED = threading.Event()


class Arg(BaseModel):
    name: str


@tool(queue="jobs", timeout=5)
def hangs(ctx: ToolContext, args: Arg) -> None:
    ENTERED.append(args.name)
    RELEASE.wait(60)


#: Set only at the end of the test that uses it: its calls never return before.
FOREVER = threading.Event()


@tool(queue="jobs", timeout=5)
def hangs_every_time(ctx: ToolContext, args: Arg) -> None:
    ENTERED.append(args.name)
    FOREVER.wait(600)


@tool(queue="jobs", timeout=5)
async def hangs_async(ctx: ToolContext, args: Arg) -> None:
    ENTERED.append(args.name)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        CANCELLED.set()
        raise


@tool(queue="other")
def quick(ctx: ToolContext, args: Arg) -> Arg:
    return args


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    RELEASE.clear()
    CANCELLED.clear()
    ENTERED.clear()
    # Retries an hour later: a timed-out call is not run again during the test.
    policy = Policy.model_validate({"defaults": {"backoff_initial": "1h", "max_attempts": 3}})
    runtime = Runtime(
        backend_url,
        tools=[hangs, hangs_async, quick],
        policies=policy,
        clock=clock,
    )
    yield runtime
    RELEASE.set()
    runtime.close()


def drain_in_background(worker: Worker) -> threading.Thread:
    t = threading.Thread(target=worker.drain, daemon=True)
    t.start()
    return t


def wait_for_entries(n: int) -> None:
    for _ in range(1000):
        if len(ENTERED) >= n:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"only {ENTERED} started")


def test_a_hung_sync_call_does_not_stop_the_other_tasks(rt: Runtime, clock: FakeClock) -> None:
    hung = rt.enqueue_action("hangs", {"name": "h"})
    others = [rt.enqueue_action("quick", {"name": f"q{i}"}) for i in range(3)]
    worker = rt.worker(concurrency=1, queues=["jobs", "other"])
    t = drain_in_background(worker)
    wait_for_entries(1)
    # Time passes only until the call is given up: the quick tasks need none.
    advance_until(clock, lambda: worker.stats["timed_out"] == 1, what="the timeout")
    t.join(REAL_TIMEOUT)
    assert not t.is_alive(), "the worker stopped: its only handler thread is hung"
    for task in others:
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    info = rt.task(hung.task_id)
    assert info.status == TaskStatus.RETRY_SCHEDULED and "timeout" in (info.error or "")
    assert worker.stats["timed_out"] == 1
    assert worker.stats["abandoned_threads"] == 1
    assert worker.abandoned == 1
    RELEASE.set()  # the hung call returns at last: its thread exits, it is not abandoned now
    for _ in range(1000):
        if worker.abandoned == 0:
            break
        threading.Event().wait(0.01)
    assert worker.abandoned == 0
    assert rt.task(hung.task_id).status == TaskStatus.RETRY_SCHEDULED  # the late result is dropped


def test_abandoned_threads_are_bounded(rt: Runtime, clock: FakeClock) -> None:
    """Beyond ``max_abandoned`` hung threads a timed-out handler keeps its slot (no
    new thread); the worker says so in its stats and log."""
    hung = [rt.enqueue_action("hangs", {"name": f"h{i}"}) for i in range(3)]
    worker = rt.worker(concurrency=2, max_abandoned=1, queues=["jobs"])
    t = drain_in_background(worker)
    wait_for_entries(2)
    advance_until(
        clock,
        lambda: len(ENTERED) == 3 and worker.stats["timed_out"] == 3,
        what="three timeouts",
    )
    # h0 and h1 timed out: one thread was replaced (the bound), one kept its slot;
    # the replacement took h2, which timed out too and kept its slot.
    assert worker.stats["timed_out"] == 3
    assert worker.stats["abandoned_threads"] == 1
    assert worker.stats["abandoned_limit"] == 2
    assert worker.abandoned == 1
    RELEASE.set()
    t.join(REAL_TIMEOUT)
    assert not t.is_alive()
    for task in hung:
        assert rt.task(task.task_id).status == TaskStatus.RETRY_SCHEDULED


def test_a_hung_async_call_is_cancelled(rt: Runtime, clock: FakeClock) -> None:
    hung = rt.enqueue_action("hangs_async", {"name": "a"})
    others = [rt.enqueue_action("quick", {"name": f"q{i}"}) for i in range(3)]
    worker = rt.worker(concurrency=1, queues=["jobs", "other"])
    t = drain_in_background(worker)
    wait_for_entries(1)
    advance_until(clock, lambda: worker.stats["timed_out"] == 1, what="the timeout")
    t.join(REAL_TIMEOUT)
    assert not t.is_alive()
    assert CANCELLED.wait(10), "the coroutine was never cancelled"
    for task in others:
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert rt.task(hung.task_id).status == TaskStatus.RETRY_SCHEDULED
    assert worker.stats["timed_out"] == 1 and worker.stats["cancelled"] == 1
    assert worker.stats["abandoned_threads"] == 0  # its thread was freed, not abandoned


def test_calls_that_hang_on_every_attempt_never_wedge_the_worker(
    backend_url: str, clock: FakeClock
) -> None:
    """Issue 27, item 16: two tasks whose calls hang on every attempt, then three
    quick ones. A retry used to call again on top of its still-hung first call;
    each abandoned another thread until ``max_abandoned`` was reached, then the
    timed-out calls kept their slots and the quick tasks stayed queued. A task
    whose earlier call still hangs is not called again: the attempt fails at
    once, and out of attempts the task is dead-lettered, never holding a slot."""
    policy = Policy.model_validate({"defaults": {"backoff_initial": "1s", "max_attempts": 3}})
    ENTERED.clear()
    FOREVER.clear()
    rt = Runtime(backend_url, tools=[hangs_every_time, quick], policies=policy, clock=clock)
    try:
        hung = [rt.enqueue_action("hangs_every_time", {"name": f"h{i}"}) for i in range(2)]
        worker = rt.worker(concurrency=2, queues=["jobs", "other"])  # max_abandoned: 2
        worker.start()
        wait_for_entries(2)
        # Their second attempts are over: called and timed out again (before the
        # fix), or failed at once without a call.
        advance_until(
            clock,
            lambda: worker.stats["timed_out"] >= 4
            or all(rt.task(h.task_id).attempt >= 3 for h in hung),
            what="both hung tasks past their second attempt",
        )  # fmt: skip
        quick_ones = [rt.enqueue_action("quick", {"name": f"q{i}"}) for i in range(3)]
        advance_until(
            clock,
            lambda: all(rt.task(q.task_id).status == TaskStatus.SUCCEEDED for q in quick_ones)
            and all(rt.task(h.task_id).status == TaskStatus.DEAD for h in hung),
            what="the quick tasks done and the hung ones dead-lettered",
        )  # fmt: skip
        assert sorted(ENTERED) == ["h0", "h1"]  # each called once: its first call still hangs
        assert worker.abandoned == 2 and worker.stats["abandoned_limit"] == 0
        assert worker.stats["still_hung"] == 4  # attempts 2 and 3 of each, not called
        for h in hung:
            error = rt.task(h.task_id).error or ""
            assert "still has not returned" in error, error
        FOREVER.set()
        stop_on_the_fake_clock(worker, clock)
    finally:
        FOREVER.set()
        rt.close()
