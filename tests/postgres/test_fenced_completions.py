"""A worker's plain successes commit at READ COMMITTED (a fenced transaction: no
serializable conflict with the completions beside it, so none aborts and none
falls into a commit group), and the cases that rest on a read stay correct
(issue 38, item 2):

* a task waiting on the finished one (``after=``) is released: the completion
  finds its waiter and runs again at SERIALIZABLE;
* an enqueue with ``after=`` racing the completion: it reads its prerequisite
  ``FOR SHARE``, so the completion's swap either waits for it and then sees its
  waiter, or commits first and the enqueue fails as a conflict and, run again,
  reads the success. Without the lock the waiter would be registered on a task
  already finished, and wait forever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import Runtime, ToolContext, tool  # noqa: E402
from agentq.backends.postgres import PostgresBackend  # noqa: E402
from agentq.clock import FakeClock  # noqa: E402
from agentq.decision import Decision  # noqa: E402
from agentq.lifecycle import tallies  # noqa: E402

_DEADLINE = 20.0  # real seconds: the waits are for other threads and the server


class Args(BaseModel):
    n: int


_gates: dict[int, threading.Event] = {}
_started: dict[int, threading.Event] = {}


@tool(queue="work")
def step(ctx: ToolContext, args: Args) -> int:
    if args.n in _gates:
        _started[args.n].set()
        assert _gates[args.n].wait(_DEADLINE)
    return args.n


@pytest.fixture
def rt(postgres_url: str) -> Iterator[Runtime]:
    runtime = Runtime(postgres_url, tools=[step], clock=FakeClock())
    assert isinstance(runtime.backend, PostgresBackend)
    _gates.clear()
    _started.clear()
    try:
        yield runtime
    finally:
        for gate in _gates.values():
            gate.set()
        runtime.close()


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _DEADLINE  # real threads and a real server
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _gated(n: int) -> threading.Event:
    _gates[n], _started[n] = threading.Event(), threading.Event()
    return _gates[n]




def test_plain_successes_commit_at_read_committed(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentq.backends.postgres import connection

    begins: list[str] = []
    real = connection.TxConn.__init__

    def spy(self: Any, conn: Any, begin: str) -> None:
        begins.append(begin)
        real(self, conn, begin)

    monkeypatch.setattr(connection.TxConn, "__init__", spy)
    worker = rt.worker(concurrency=4, batch_size=4)
    for i in range(4):
        rt.enqueue_action("step", {"n": i})
    begins.clear()
    assert worker.drain() == 4
    assert all(t.status == "succeeded" for t in rt.tasks())
    assert worker.stats["fenced_commits"] >= 1
    # The lease and its claim at READ COMMITTED; the completion too: nothing serializable.
    assert not any("SERIALIZABLE" in b for b in begins), begins
    # The fenced commit counts them on the overview's chart like any completion.
    minute = tallies.minute_of(rt.clock.now())
    counted = rt.backend.read_tallies(minute, minute + 1)
    assert [(t.outcome, t.count) for t in counted] == [("succeeded", 4)]


def _run_worker(rt: Runtime) -> tuple[threading.Thread, list[int]]:
    done: list[int] = []
    worker = rt.worker(concurrency=2, batch_size=2)
    thread = threading.Thread(target=lambda: done.append(worker.drain()), daemon=True)
    thread.start()
    return thread, done


def test_a_task_waiting_on_a_plain_success_is_released(rt: Runtime) -> None:
    gate = _gated(1)
    first = rt.enqueue_action("step", {"n": 1})
    thread, _ = _run_worker(rt)
    assert _started[1].wait(_DEADLINE)
    waiter = rt.enqueue_action("step", {"n": 2}, after=[first.task_id])  # it runs meanwhile
    assert rt.task(waiter.task_id).status == "waiting"
    gate.set()
    thread.join(_DEADLINE)
    assert rt.task(first.task_id).status == "succeeded"
    rt.worker().drain()
    assert rt.task(waiter.task_id).status == "succeeded"


def _lock_waiters(rt: Runtime) -> int:
    backend = rt.backend
    assert isinstance(backend, PostgresBackend)
    return int(backend._db.read(
        lambda conn: conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()[0]  # type: ignore[index]
    ))


def test_an_enqueue_that_locks_first_is_seen_by_the_completion(rt: Runtime) -> None:
    gate = _gated(1)
    first = rt.enqueue_action("step", {"n": 1})
    thread, _ = _run_worker(rt)
    assert _started[1].wait(_DEADLINE)
    read, go = threading.Event(), threading.Event()
    made: list[str] = []

    def enqueue(tx: Decision) -> None:
        made.append(tx.enqueue("step", {"n": 2}, after=[first.task_id]).task_id)
        read.set()  # its prerequisite read (locked), its waiter registered: not committed
        assert go.wait(_DEADLINE)

    enqueuer = threading.Thread(target=lambda: rt.transact(enqueue), daemon=True)
    enqueuer.start()
    assert read.wait(_DEADLINE)
    gate.set()  # the completion's swap now waits for the enqueue's lock
    _until(lambda: _lock_waiters(rt) > 0 or rt.task(first.task_id).status == "succeeded",
           "the completion to wait for the enqueue's lock")  # fmt: skip
    go.set()
    enqueuer.join(_DEADLINE)
    thread.join(_DEADLINE)
    assert rt.task(first.task_id).status == "succeeded"
    rt.worker().drain()
    assert rt.task(made[-1]).status == "succeeded"  # released by the completion


def test_an_enqueue_after_the_completion_reads_the_success(rt: Runtime) -> None:
    gate = _gated(1)
    first = rt.enqueue_action("step", {"n": 1})
    thread, _ = _run_worker(rt)
    assert _started[1].wait(_DEADLINE)
    runs: list[int] = []
    made: list[str] = []

    def enqueue(tx: Decision) -> None:
        runs.append(1)
        tx.execute("SELECT 1")  # the snapshot: taken while the prerequisite runs
        if len(runs) == 1:
            gate.set()
            _until(lambda: rt.task(first.task_id).status == "succeeded", "the completion")
        made.append(tx.enqueue("step", {"n": 2}, after=[first.task_id]).task_id)

    rt.transact(enqueue)
    thread.join(_DEADLINE)
    assert len(runs) == 2, "the locked read of a task finished since the snapshot conflicts"
    # Not waiting: its prerequisite had succeeded (the worker's drain may have run it).
    assert rt.task(made[-1]).status in ("queued", "succeeded")
    rt.worker().drain()
    assert rt.task(made[-1]).status == "succeeded"
