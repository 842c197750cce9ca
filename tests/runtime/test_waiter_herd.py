"""Issue 27 item 10, the waiter herd: a parked wait (``rt.wait``, the HTTP API's
``Prefer: wait`` long-poll and event streams) is woken by the commits that wrote
its task, not by every commit. Every commit used to wake every parked waiter to
read its task again: 150 parked long-polls made 300 other enqueues take 8.0 s
instead of 0.9 s.

The count is of wake-ups set on the waiter (a spy on its subscription), so the
test does not depend on timing: a commit made in this process sets its
wake-ups before ``transact`` returns. The SQLite watcher, which hears other
processes' commits, looks at a waited-on task when its waiter subscribes; the
bounds below still allow it one wake-up (a first look that failed).
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
from agentq.backends.notify import record_topic
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


class CountingWake:
    """A subscriber that counts how often it was set."""

    def __init__(self) -> None:
        self.count = 0

    def set(self) -> None:
        self.count += 1


class Spy:
    """Counts the calls of one method of one object (monkeypatched)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        self.calls = 0
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


def _until(what: Any, message: str) -> None:
    deadline = time.monotonic() + BOUND
    while not what():
        assert time.monotonic() < deadline, message
        time.sleep(0.001)


def _parked(backend: SQLiteBackend, count: int) -> tuple[list[str], list[CountingWake]]:
    """``count`` task records, each with a subscriber parked on it (as a waiter
    subscribes, before it reads)."""
    keys = [f"t{i:03d}" for i in range(count)]
    backend.transact(lambda tx: [tx.put_record("tasks", k, {"n": 0}) for k in keys])
    wakes = [CountingWake() for _ in keys]
    for key, wake in zip(keys, wakes, strict=True):
        backend.subscribe_commits(wake, record_topic("tasks", key))
    return keys, wakes


def test_the_servers_own_commits_cost_parked_readers_no_pass_over_them(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every commit this process makes is a change of the WAL, so a check by the
    watcher: with 500 parked long-polls it went over all 500 waited-on records
    (twice) for each of the server's own enqueues, a millisecond of the GIL
    each, and 300 enqueues took 1.38x as long with them parked. Own commits
    wake their readers themselves: the watcher's check does nothing per reader."""
    backend = rt.backend
    assert isinstance(backend, SQLiteBackend) and backend._watcher is not None
    watcher = backend._watcher
    keys, wakes = _parked(backend, 200)
    checks = watcher.reader_checks
    backend.transact(lambda tx: tx.put_record("tasks", "first", {"n": 0}))
    # The check after it looks once at what is new (200 readers): a pass, once.
    _until(lambda: watcher.reader_checks > checks, "the watcher never checked")
    passes = Spy(monkeypatch, backend._commits, "topics")  # a pass lists the waited-on records
    reads = Spy(monkeypatch, watcher._reader_checks, "_read_versions")
    for i in range(20):
        checks = watcher.reader_checks
        backend.transact(lambda tx, i=i: tx.put_record("tasks", f"other-{i}", {"n": i}))
        _until(lambda c=checks: watcher.reader_checks > c, "the watcher never checked")
    assert (passes.calls, reads.calls) == (0, 0), (
        f"20 own commits: {passes.calls} passes over the 200 parked readers, "
        f"{reads.calls} reads of their records")
    assert sum(w.count for w in wakes) == 0
    backend.transact(lambda tx: tx.put_record("tasks", keys[7], {"n": 1}))
    assert [i for i, w in enumerate(wakes) if w.count] == [7]  # its own commit woke it, at once


def test_another_process_first_commit_wakes_no_new_reader_whose_record_it_left(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader's first check used to count as a change (its record not looked
    at before): 500 long-polls parked at once were 500 wake-ups and reads at the
    next commit of a worker process, whatever it wrote. The watcher looks at a
    record when its reader subscribes, so that commit wakes nobody."""
    backend = rt.backend
    assert isinstance(backend, SQLiteBackend) and backend._watcher is not None
    watcher = backend._watcher
    keys, wakes = _parked(backend, 50)
    reads = Spy(monkeypatch, watcher._reader_checks, "_read_versions")
    other = sqlite3.connect(backend.path, isolation_level=None)
    note = "UPDATE agentq_records SET v = json_set(v, '$.n', ?) WHERE tbl = 'tasks' AND k = ?"
    try:
        backend.transact(lambda tx: tx.put_record("tasks", "bystander", {"n": 0}))
        seen = reads.calls
        other.execute(note, (5, "bystander"))
        _until(lambda: reads.calls > seen, "the watcher never read the waited-on records")
        woken = [k for k, w in zip(keys, wakes, strict=True) if w.count]
        assert woken == [], f"a commit of another record woke {len(woken)} new readers"
        seen = reads.calls
        other.execute(note, (6, keys[3]))
        _until(lambda: reads.calls > seen and wakes[3].count > 0, "its reader slept on")
        assert [k for k, w in zip(keys, wakes, strict=True) if w.count] == [keys[3]]
    finally:
        other.close()
