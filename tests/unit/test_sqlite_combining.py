"""Group commit by combining: the leader runs the functions of the transactions
queued behind it (:mod:`agentq.backends.combining`). What that changes for
a function: the thread it runs on (not its context), and how a failure of one
member is undone (all roll back, the others run again)."""

from __future__ import annotations

import contextvars
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Transaction
from agentq.backends.sqlite import SQLiteBackend

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SQLiteBackend]:
    b = SQLiteBackend(str(tmp_path / "c.db"))
    yield b
    b.close()


class Holder:
    """A transaction that leads and holds the connection until :meth:`release`,
    so the ones started meanwhile queue behind it, in the order they start."""

    def __init__(self, backend: SQLiteBackend) -> None:
        self.backend = backend
        self.runs = 0
        self.thread_ids: list[int] = []
        self._running = threading.Event()
        self._release = threading.Event()
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []

    def body(self, tx: Transaction) -> None:
        self.runs += 1
        self.thread_ids.append(threading.get_ident())
        tx.put_record("t", "holder", {"runs": self.runs})
        self._running.set()
        self._release.wait(10)

    def start(self) -> None:
        self._spawn(lambda: self.backend.transact(self.body), wait=False)
        assert self._running.wait(10)

    def spawn(self, fn: Callable[[Transaction], Any]) -> None:
        """Run ``transact(fn)`` in a thread of its own and wait until it queues."""
        self.spawn_call(lambda: self.backend.transact(fn))

    def spawn_call(self, call: Callable[[], Any]) -> None:
        """Run ``call`` (which calls transact) in a thread of its own and wait
        until its transaction queues."""
        self._spawn(call, wait=True)

    def _spawn(self, call: Callable[[], Any], wait: bool) -> None:
        before = self.backend._db._queue.waiting()

        def run() -> None:
            try:
                call()
            except BaseException as exc:  # reported to the test
                self.errors.append(exc)

        t = threading.Thread(target=run)
        self._threads.append(t)
        t.start()
        if wait:
            for _ in range(10_000):
                if self.backend._db._queue.waiting() > before:
                    return
                threading.Event().wait(0.001)
            raise AssertionError("the transaction never queued")

    def release(self) -> None:
        self._release.set()
        for t in self._threads:
            t.join(10)
            assert not t.is_alive()


def test_a_lone_transaction_has_no_savepoint(backend: SQLiteBackend) -> None:
    statements: list[str] = []
    backend._db._conn.set_trace_callback(statements.append)
    backend.transact(lambda tx: tx.put_record("t", "alone", {}))
    backend._db._conn.set_trace_callback(None)
    # The trigger that keeps the counts is traced as its statement again.
    kept = [s.split()[0] for i, s in enumerate(statements) if i == 0 or s != statements[i - 1]]
    assert kept == ["BEGIN", "INSERT", "COMMIT"]


def test_a_queued_function_runs_on_the_leaders_thread_in_its_callers_context(
    backend: SQLiteBackend,
) -> None:
    holder = Holder(backend)
    holder.start()
    seen: list[tuple[str, int]] = []

    def caller() -> None:
        request_id.set("req-42")  # set in the caller's thread, before it queues
        backend.transact(lambda tx: seen.append((request_id.get(), threading.get_ident())))

    holder.spawn_call(caller)
    holder.release()
    assert holder.errors == []
    assert seen == [("req-42", holder.thread_ids[0])]
    assert request_id.get() == "none"  # and it leaked into no other context


def test_after_one_failure_the_rest_of_the_group_runs_in_savepoints(
    backend: SQLiteBackend,
) -> None:
    """A failing member rolls the group back and the ones before it run again,
    once: after it, each member has a savepoint, so more failures cost no re-runs."""
    statements: list[str] = []
    backend._db._conn.set_trace_callback(statements.append)
    holder = Holder(backend)
    holder.start()
    runs: Counter[str] = Counter()

    def member(name: str, fails: bool) -> Callable[[Transaction], None]:
        def fn(tx: Transaction) -> None:
            runs[name] += 1
            tx.put_record("t", name, {})
            if fails:
                raise ValueError(name)

        return fn

    plan = [("good1", False), ("bad1", True), ("bad2", True), ("good2", False), ("bad3", True)]
    for name, fails in plan:
        holder.spawn(member(name, fails))
    holder.release()
    backend._db._conn.set_trace_callback(None)
    assert sorted(str(e) for e in holder.errors) == ["bad1", "bad2", "bad3"]
    assert holder.runs == 2 and runs["good1"] == 2  # ran again after bad1, never after
    assert runs == {"good1": 2, "bad1": 1, "bad2": 1, "good2": 1, "bad3": 1}
    assert statements.count("COMMIT") == 1
    assert statements.count("ROLLBACK") == 1
    assert statements.count("ROLLBACK TO agentq_member") == 2
    stored = {k for k, _ in backend.list_records("t")}
    assert stored == {"holder", "good1", "good2"}


def test_ctrl_c_inside_another_members_function_reaches_that_member_and_the_leader(
    backend: SQLiteBackend,
) -> None:
    holder = Holder(backend)
    holder.start()

    def interrupted(tx: Transaction) -> None:
        tx.put_record("t", "interrupted", {})
        raise KeyboardInterrupt

    holder.spawn(interrupted)
    holder.spawn(lambda tx: tx.put_record("t", "after", {}))
    holder.release()
    # The member whose function raised it, and the leader (whose thread it was).
    assert [type(e) for e in holder.errors] == [KeyboardInterrupt, KeyboardInterrupt]
    # The leader's own work and the other member's were committed all the same.
    assert {k for k, _ in backend.list_records("t")} == {"holder", "after"}


def test_a_leader_stopped_before_it_took_its_group_does_not_wedge_the_queue(
    backend: SQLiteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = backend._db._queue
    take = queue.take
    calls = 0

    def interrupted_once(durable: bool, limit: int) -> list[Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyboardInterrupt  # between queuing and taking its group
        return take(durable, limit)

    monkeypatch.setattr(queue, "take", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        backend.transact(lambda tx: tx.put_record("t", "lost", {}))
    done = threading.Event()
    t = threading.Thread(target=lambda: (backend.transact(
        lambda tx: tx.put_record("t", "next", {})), done.set()))  # fmt: skip
    t.start()
    t.join(10)
    assert done.is_set(), "the next transaction waited on a leader that was gone"
    assert {k for k, _ in backend.list_records("t")} == {"next"}


def test_many_callers_each_get_exactly_their_own_outcome(backend: SQLiteBackend) -> None:
    """Eight threads, durable and bookkeeping transactions mixed, one in four
    raising: every call that returned is written, with the result it returned
    and its own context; every call that raised left nothing."""
    outcomes: dict[str, str] = {}
    lock = threading.Lock()

    def caller(c: int) -> None:
        for i in range(80):
            name = f"{c}-{i}"
            request_id.set(name)

            def fn(tx: Transaction, name: str = name, fails: bool = i % 4 == 3) -> str:
                tx.put_record("many", name, {"seen": request_id.get()})
                if fails:
                    raise LookupError(name)
                return f"done {request_id.get()}"

            try:
                result = backend.transact(fn, durable=i % 3 != 0)
            except LookupError as exc:
                result = f"raised {exc}"
            with lock:
                outcomes[name] = result

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    stored = dict(backend.list_records("many"))
    for name, result in outcomes.items():
        if result == f"raised {name}":
            assert name not in stored
        else:
            assert result == f"done {name}"
            assert stored[name] == {"seen": name}
    assert len(outcomes) == 8 * 80 and len(stored) == 8 * 60


def test_an_error_copied_for_another_member_keeps_the_drivers_error_code() -> None:
    """When BEGIN fails for a group, each member raises its own copy of the
    error: the copy must keep the driver's error code, which decides the agentq
    error it becomes (:mod:`agentq.backends.sqlite.driver_errors`)."""
    from agentq.backends import combining

    failure: sqlite3.OperationalError | None = None
    try:
        sqlite3.connect(":memory:").execute("SELECT * FROM nowhere")
    except sqlite3.OperationalError as exc:
        failure = exc
    assert failure is not None and failure.sqlite_errorcode == sqlite3.SQLITE_ERROR
    copied = combining._copy(failure)
    assert copied is not failure and str(copied) == str(failure)
    assert copied.sqlite_errorcode == failure.sqlite_errorcode  # type: ignore[attr-defined]
