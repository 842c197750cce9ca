"""rt.wait / rt.wait_async: woken by commits (this process's and another's), the
current task at the timeout, a clear error for an unknown task."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq import FakeClock, Runtime, SystemClock
from agentq.demo_server import DemoAPI
from agentq.errors import InvalidArguments, TaskNotFound
from agentq.ledger import TaskStatus
from tests.http.conftest import settings_for

ROOT = Path(__file__).resolve().parents[2]


def _runtime(db_url: str, api: DemoAPI, clock: Any) -> Runtime:
    return Runtime(db_url, tools=ROOT / "tools", policies=ROOT / "policies",
                   clock=clock, settings=settings_for(api))  # fmt: skip


@pytest.fixture
def rt(db_url: str, api: DemoAPI) -> Iterator[Runtime]:
    runtime = _runtime(db_url, api, SystemClock())
    yield runtime
    runtime.close()


@pytest.mark.slow
def test_wait_returns_when_a_worker_in_another_process_finishes(
    rt: Runtime, spawn_worker: Any, api: DemoAPI
) -> None:
    spawn_worker()
    task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 5})
    done = rt.wait(task.task_id, timeout=60)
    assert done.status is TaskStatus.SUCCEEDED
    assert done.result["amount"] == 5
    assert api.state.requests["/refunds"] == 1


@pytest.mark.slow
def test_wait_async_returns_when_a_worker_in_another_process_finishes(
    rt: Runtime, spawn_worker: Any
) -> None:
    spawn_worker()
    tasks = [rt.enqueue_action("execute_refund", {"order_id": f"o{i}", "amount": 5})
             for i in range(3)]  # fmt: skip

    async def main() -> list[Any]:
        return await asyncio.gather(*(rt.wait_async(t.task_id, 60) for t in tasks))

    done = asyncio.run(main())
    assert [d.status for d in done] == [TaskStatus.SUCCEEDED] * 3


def test_wait_is_woken_by_a_commit_in_this_process(db_url: str, api: DemoAPI) -> None:
    """With a fake clock nothing but the commit can end the wait (time never moves)."""
    clock = FakeClock()
    rt = _runtime(db_url, api, clock)
    try:
        task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 5})
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(rt.wait(task.task_id, 30)))
        waiter.start()
        clock.wait_for_sleepers(1)
        rt.cancel(task.task_id)
        waiter.join(10)
        assert not waiter.is_alive()
        assert got[0].status is TaskStatus.CANCELLED
    finally:
        rt.close()


def test_wait_returns_the_current_task_at_the_timeout(db_url: str, api: DemoAPI) -> None:
    clock = FakeClock()
    rt = _runtime(db_url, api, clock)
    try:
        task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 5})
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(rt.wait(task.task_id, 30)))
        waiter.start()
        clock.wait_for_sleepers(1)
        clock.advance(31)
        waiter.join(10)
        assert not waiter.is_alive()
        assert got[0].status is TaskStatus.QUEUED and not got[0].done
    finally:
        rt.close()


def test_wait_async_returns_the_current_task_at_the_timeout(db_url: str, api: DemoAPI) -> None:
    clock = FakeClock()
    rt = _runtime(db_url, api, clock)
    try:
        task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 5})

        async def main() -> Any:
            waiting = asyncio.ensure_future(rt.wait_async(task.task_id, 30))
            await asyncio.sleep(0.05)  # let it start; the fake clock has not moved
            assert not waiting.done()
            clock.advance(31)
            return await asyncio.wait_for(waiting, 10)

        assert asyncio.run(main()).status is TaskStatus.QUEUED
    finally:
        rt.close()


def test_a_finished_task_returns_at_once_and_zero_timeout_reads_once(rt: Runtime) -> None:
    task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 5})
    assert rt.wait(task.task_id, 0).status is TaskStatus.QUEUED
    rt.cancel(task.task_id)
    assert rt.wait(task.task_id, 3600).status is TaskStatus.CANCELLED


def test_unknown_task_and_bad_timeouts_are_clear_errors(rt: Runtime) -> None:
    with pytest.raises(TaskNotFound, match="no task 'tsk_nope'"):
        rt.wait("tsk_nope", 1)
    with pytest.raises(TaskNotFound):
        asyncio.run(rt.wait_async("tsk_nope", 1))
    task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 5})
    for bad in (-1, float("nan"), float("inf"), 3601, "5", True):
        with pytest.raises(InvalidArguments, match="timeout"):
            rt.wait(task.task_id, bad)  # type: ignore[arg-type]


@pytest.mark.slow
def test_waiting_reads_the_task_only_when_something_commits(rt: Runtime) -> None:
    """Not a polling loop: a quiet database is read once in a 0.5 s wait."""
    task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 5})
    reads = 0
    real = rt.backend.get_record

    def counting(table: str, key: str) -> Any:
        nonlocal reads
        reads += 1
        return real(table, key)

    rt.backend.get_record = counting  # type: ignore[method-assign]
    assert rt.wait(task.task_id, 0.5).status is TaskStatus.QUEUED
    assert reads <= 2  # one read, at most one after a stray wake-up
