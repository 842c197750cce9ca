"""Issue 27 item 10, the waiter herd: a parked wait (``rt.wait``, the HTTP API's
``Prefer: wait`` long-poll and event streams) is woken by the commits that wrote
its task, not by every commit. Every commit used to wake every parked waiter to
read its task again: 150 parked long-polls made 300 other enqueues take 8.0 s
instead of 0.9 s.

The count is of wake-ups set on the waiter (a spy on its subscription), so the
test does not depend on timing: a commit made in this process sets its
wake-ups before ``transact`` returns. The SQLite watcher, which hears other
processes' commits, may add one (its first look at the waited-on task).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq import Runtime, TaskStatus
from agentq.backends.sqlite import SQLiteBackend

ROOT = Path(__file__).resolve().parents[2]
BOUND = 30.0  # seconds any one step may take on a loaded machine


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = Runtime(f"sqlite:///{tmp_path / 'herd.db'}", tools=ROOT / "tools",
                      policies=ROOT / "policies")  # fmt: skip
    yield runtime
    runtime.close()


class WakeSpy:
    """Counts the wake-ups set on every waiter that subscribes to the backend's commits."""

    def __init__(self, rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: list[int] = []
        self.subscribed = threading.Event()
        backend = rt.backend
        subscribe = backend.subscribe_commits

        def spying(wake: Any, *args: Any, **kwargs: Any) -> None:
            index = len(self.counts)
            self.counts.append(0)
            real_set = wake.set

            def counted() -> None:
                self.counts[index] += 1
                real_set()

            wake.set = counted
            subscribe(wake, *args, **kwargs)
            self.subscribed.set()

        monkeypatch.setattr(backend, "subscribe_commits", spying)


def _refund(order: str) -> dict[str, Any]:
    return {"order_id": order, "amount": 5}


def test_a_parked_wait_is_not_woken_by_other_tasks_commits(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = rt.enqueue_action("execute_refund", _refund("target"))
    spy = WakeSpy(rt, monkeypatch)
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(rt.wait(target.task_id, 120)))
    waiter.start()
    try:
        assert spy.subscribed.wait(BOUND)
        for i in range(30):
            rt.enqueue_action("execute_refund", _refund(f"other-{i}"))
        woken = spy.counts[0]
        assert woken <= 1, f"30 commits of other tasks woke the parked wait {woken} times"
        rt.cancel(target.task_id, "done waiting")  # its own change wakes it at once
        waiter.join(BOUND)
        assert not waiter.is_alive() and result[0].status == TaskStatus.CANCELLED
    finally:
        if waiter.is_alive():
            rt.cancel(target.task_id, "test ends")
            waiter.join(BOUND)


def test_an_event_stream_is_not_woken_by_other_tasks_commits(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The async form (server-sent events, the long-poll of the HTTP API)."""
    target = rt.enqueue_action("execute_refund", _refund("target"))
    spy = WakeSpy(rt, monkeypatch)

    async def follow() -> list[TaskStatus]:
        seen = []
        async for task in rt.task_changes(target.task_id, 120):
            seen.append(task.status)
        return seen

    async def scenario() -> tuple[list[TaskStatus], int]:
        stream = asyncio.ensure_future(follow())
        while not spy.subscribed.is_set():
            await asyncio.sleep(0.001)
        for i in range(30):
            await asyncio.to_thread(rt.enqueue_action, "execute_refund", _refund(f"o{i}"))
        woken = spy.counts[0]
        await asyncio.to_thread(rt.cancel, target.task_id, "done")
        return await asyncio.wait_for(stream, BOUND), woken

    statuses, woken = asyncio.run(scenario())
    assert woken <= 1, f"30 commits of other tasks woke the event stream {woken} times"
    assert statuses[-1] == TaskStatus.CANCELLED


@pytest.mark.slow
def test_another_process_commits_wake_only_the_waiters_of_what_they_changed(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits another connection makes (another process, as far as the watcher
    can tell) are one version check of the waited-on tasks, not a read by each
    waiter; the check still wakes the waiter whose task they changed."""
    backend = rt.backend
    assert isinstance(backend, SQLiteBackend) and backend._watcher is not None
    watcher = backend._watcher
    target = rt.enqueue_action("execute_refund", _refund("target"))
    bystander = rt.enqueue_action("execute_refund", _refund("bystander"))
    spy = WakeSpy(rt, monkeypatch)
    done: list[Any] = []
    waiter = threading.Thread(target=lambda: done.append(rt.wait(target.task_id, 120)))
    waiter.start()
    other = sqlite3.connect(backend.path, isolation_level=None)
    try:
        assert spy.subscribed.wait(BOUND)

        def committed_and_checked(sql: str, *params: Any) -> None:
            checks = watcher.reader_checks
            other.execute(sql, params)
            deadline = time.monotonic() + BOUND
            while watcher.reader_checks == checks:  # the watcher looked after this commit
                assert time.monotonic() < deadline, "the watcher never checked the readers"
                time.sleep(0.001)

        committed_and_checked("UPDATE agentq_records SET v = json_set(v, '$.note', 'x') "
                              "WHERE tbl = 'tasks' AND k = ?", bystander.task_id)  # fmt: skip
        first = spy.counts[0]  # the watcher's first look at the target may wake it once
        note = "UPDATE agentq_records SET v = json_set(v, '$.note', ?) WHERE tbl='tasks' AND k=?"
        for i in range(10):
            committed_and_checked(note, f"n{i}", bystander.task_id)
        assert spy.counts[0] == first, "another task's changes woke the waiter"
        committed_and_checked("UPDATE agentq_records SET v = json_set(v, '$.status', "
                              "'cancelled') WHERE tbl = 'tasks' AND k = ?",
                              target.task_id)  # fmt: skip
        waiter.join(BOUND)
        assert not waiter.is_alive() and done[0].status == TaskStatus.CANCELLED
    finally:
        other.close()
        if waiter.is_alive():
            rt.cancel(target.task_id, "test ends")
            waiter.join(BOUND)
