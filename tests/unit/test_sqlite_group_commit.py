"""SQLite group commit: transactions queued behind a running one are run by its
thread and share its COMMIT, and stay atomic and isolated
(:mod:`agentq.backends.combining`)."""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Transaction
from agentq.backends.sqlite import SQLiteBackend
from agentq.errors import BackendUnavailable


@pytest.fixture(params=["full", "normal"])
def backend(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SQLiteBackend]:
    b = SQLiteBackend(str(tmp_path / "g.db"), durability=request.param)
    yield b
    b.close()


def _wait_for_arrivals(backend: SQLiteBackend, n: int) -> None:
    for _ in range(10_000):
        if backend._db._queue.waiting() >= n:
            return
        threading.Event().wait(0.001)
    raise AssertionError(f"{n} writers never queued")


def test_queued_transactions_share_one_commit_and_a_failure_undoes_only_itself(
    backend: SQLiteBackend,
) -> None:
    statements: list[str] = []
    backend._db._conn.set_trace_callback(statements.append)
    release = threading.Event()
    errors: list[BaseException] = []

    runs: Counter[str] = Counter()

    def first(tx: Transaction) -> None:
        runs["first"] += 1
        tx.put_record("t", "first", {"ok": True})
        release.wait(10)  # hold the connection until the others queue behind us

    def good(tx: Transaction) -> None:
        tx.put_record("t", "good", {"ok": True})

    def bad(tx: Transaction) -> None:
        tx.put_record("t", "bad", {"ok": False})
        raise ValueError("the decision changed its mind")

    def run(fn: object) -> None:
        try:
            backend.transact(fn)  # type: ignore[arg-type]
        except ValueError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in (first, good, bad)]
    threads[0].start()
    while not any(s.startswith("INSERT INTO agentq_records") for s in statements):
        threading.Event().wait(0.001)
    threads[1].start()
    threads[2].start()
    _wait_for_arrivals(backend, 2)
    release.set()
    for t in threads:
        t.join(10)
    backend._db._conn.set_trace_callback(None)
    assert [str(e) for e in errors] == ["the decision changed its mind"]
    assert backend.get_record("t", "first") == {"ok": True}
    assert backend.get_record("t", "good") == {"ok": True}
    assert backend.get_record("t", "bad") is None
    assert statements.count("COMMIT") == 1  # three transactions, one commit
    # No savepoints: the failure rolled all back, and the first ran again.
    assert statements.count("ROLLBACK") == 1
    assert runs["first"] == 2


def test_concurrent_transactions_stay_atomic_and_readers_never_see_a_half(
    backend: SQLiteBackend,
) -> None:
    stop = threading.Event()
    torn: list[str] = []

    def writer(w: int) -> None:
        for i in range(60):

            def fn(tx: Transaction, i: int = i) -> None:
                tx.put_record("pairs", f"a-{w}-{i}", {"i": i})
                tx.put_record("pairs", f"b-{w}-{i}", {"i": i})
                if i % 5 == 0:
                    raise KeyError("abandoned")

            try:
                backend.transact(fn)
            except KeyError:
                pass

    def reader() -> None:
        while not stop.is_set():
            keys = {k for k, _ in backend.list_records("pairs")}
            for k in keys:
                twin = ("b" if k[0] == "a" else "a") + k[1:]
                if twin not in keys:
                    torn.append(k)

    r = threading.Thread(target=reader)
    r.start()
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(60)
    stop.set()
    r.join(10)
    keys = {k for k, _ in backend.list_records("pairs")}
    assert torn == []
    assert len(keys) == 8 * 48 * 2  # every fifth transaction rolled back, alone
    assert not any(k.endswith(("-0", "-5")) for k in keys)


def test_a_durable_transaction_never_rides_a_group_committed_at_normal(
    backend: SQLiteBackend,
) -> None:
    if backend.durability == "normal":
        pytest.skip("everything commits at NORMAL")
    statements: list[str] = []
    backend._db._conn.set_trace_callback(statements.append)
    release = threading.Event()

    def lease_like(tx: Transaction) -> None:
        tx.put_record("t", "bookkeeping", {})
        release.wait(10)

    t1 = threading.Thread(target=lambda: backend.transact(lease_like, durable=False))
    t1.start()
    while "BEGIN IMMEDIATE" not in statements:
        threading.Event().wait(0.001)
    t2 = threading.Thread(target=lambda: backend.transact(
        lambda tx: tx.put_record("t", "decision", {})))  # fmt: skip
    t2.start()
    _wait_for_arrivals(backend, 1)
    release.set()
    t1.join(10)
    t2.join(10)
    backend._db._conn.set_trace_callback(None)
    assert statements.count("COMMIT") == 2
    # The durable one began after the NORMAL group had committed and FULL was restored.
    second_begin = [i for i, s in enumerate(statements) if s == "BEGIN IMMEDIATE"][1]
    assert "PRAGMA synchronous=FULL" in statements[:second_begin]
    assert backend.get_record("t", "decision") == {}


class _FailingCommit:
    """The backend's connection, with its next COMMIT failing (a disk error, say)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.fail_next_commit = True

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and self.fail_next_commit:
            self.fail_next_commit = False
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_when_the_shared_commit_fails_the_waiting_members_run_again_alone(
    backend: SQLiteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend._db, "_conn", _FailingCommit(backend._db._conn))
    queued, running = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first(tx: Transaction) -> None:
        tx.put_record("t", "first", {"ok": True})
        running.set()
        queued.wait(10)  # until the second one queues behind us: we commit for both

    def second(tx: Transaction) -> None:
        tx.put_record("t", "second", {"ok": True})

    def run(fn: Any) -> None:
        try:
            backend.transact(fn)
        except BackendUnavailable as exc:
            errors.append(exc)

    a = threading.Thread(target=run, args=(first,))
    a.start()
    assert running.wait(10)  # the first one leads, holding the connection
    b = threading.Thread(target=run, args=(second,))
    b.start()
    _wait_for_arrivals(backend, 1)
    queued.set()
    a.join(10)
    b.join(10)
    # The first led the group; its COMMIT failed, so it reports the error. The
    # second had only waited: nothing of it was written, so it ran again, alone.
    # It is mapped to an agentq error, the driver's kept as the cause.
    assert len(errors) == 1 and "disk I/O error" in str(errors[0])
    assert isinstance(errors[0].__cause__, sqlite3.OperationalError)
    assert backend.get_record("t", "first") is None
    assert backend.get_record("t", "second") == {"ok": True}
