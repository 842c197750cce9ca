"""Group commit on PostgreSQL (:mod:`agentq.backends.postgres.grouping`): after a
conflict, the transactions of the threads that conflicted run one after the other
in commit groups, and each still gets its own outcome.

Threads and a real server; no test waits on a clock: a transaction holds the
group open until the others are queued behind it (the queue's count says so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import Runtime  # noqa: E402
from agentq.backends import Transaction, open_backend  # noqa: E402
from agentq.backends.postgres import PostgresBackend, grouping  # noqa: E402
from agentq.errors import BackendUnavailable, DuplicateKey  # noqa: E402
from agentq.spec import QueueSpec  # noqa: E402
from tests.postgres.server import end_sessions_at_commit  # noqa: E402

_TOOL = """
from pydantic import BaseModel
from agentq import ToolContext, tool

class Args(BaseModel):
    n: int

@tool(queue="work")
def noop(ctx: ToolContext, args: Args) -> dict:
    return {}
"""


@pytest.fixture
def backend(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[PostgresBackend]:
    # Grouped for the whole test once a conflict happened (a loaded machine may
    # take longer than the real second the backend keeps grouping for).
    monkeypatch.setattr(grouping, "CONTENDED_SECONDS", 3600.0)
    b = open_backend(postgres_url)
    assert isinstance(b, PostgresBackend)
    b.create_queue(QueueSpec.simple("Jobs"))
    yield b
    b.close()


class Calls:
    """``transact`` calls in threads of their own, each outcome kept."""

    def __init__(self, backend: PostgresBackend, *, contended: bool) -> None:
        self.backend = backend
        self.contended = contended  # each thread as if its transactions had conflicted
        self.outcomes: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []

    def start(self, name: str, fn: Callable[[Transaction], Any], *, queues: bool = True) -> None:
        """Run ``fn`` in a thread; with ``queues``, return once it waits in the
        commit queue (a leader is taken off it at once: it never shows there)."""

        def run() -> None:
            if self.contended:
                self.backend._group.conflicted()
            try:
                self.outcomes[name] = self.backend.transact(fn)
            except BaseException as exc:  # the outcome under test
                self.outcomes[name] = exc

        before = self.backend._group._queue.waiting()
        t = threading.Thread(target=run, name=name)
        self._threads.append(t)
        t.start()
        if queues:
            self._wait(lambda: self.backend._group._queue.waiting() > before or not t.is_alive())

    def join(self) -> None:
        for t in self._threads:
            t.join(60)
            assert not t.is_alive()

    @staticmethod
    def _wait(done: Callable[[], bool]) -> None:
        pause = threading.Event()
        for _ in range(20_000):
            if done():
                return
            pause.wait(0.001)
        raise AssertionError("the transaction never queued")


def test_after_a_conflict_the_transactions_of_the_thread_run_in_groups(
    backend: PostgresBackend,
) -> None:
    # Two read-then-write transactions of one record, side by side: one of them
    # is aborted by the server (serialization failure) and runs again, in a
    # group, and so does every transaction of its thread for a while.
    backend.transact(lambda tx: tx.put_record("counters", "c", {"n": 0}))
    both_read = threading.Barrier(2, timeout=30)
    first_runs: set[str] = set()

    def bump(tx: Transaction, who: str) -> None:
        n = (tx.get_record("counters", "c") or {"n": 0})["n"]
        if who not in first_runs:  # only the first run waits for the other's read
            first_runs.add(who)
            both_read.wait()
        tx.put_record("counters", "c", {"n": n + 1})

    contended: dict[str, bool] = {}

    def run(who: str) -> None:
        assert not backend._group.contended
        backend.transact(lambda tx: bump(tx, who))
        contended[who] = backend._group.contended

    threads = [threading.Thread(target=run, args=(who,)) for who in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert backend.get_record("counters", "c") == {"n": 2}  # no lost update
    assert sorted(contended.values()) in ([False, True], [True, True])  # the loser's thread


def _leader_then_a_taken_key(calls: Calls) -> threading.Event:
    """Start a leader that writes a record and holds its group open, then a
    member sending the key "taken" (held back: it fails in the group's next round
    trip); the leader ends when the returned event is set."""
    holding, release = threading.Event(), threading.Event()

    def leader(tx: Transaction) -> str:
        tx.put_record("notes", "leader", {"ok": True})
        holding.set()
        release.wait(30)
        return "leader"

    def sends_a_taken_key(tx: Transaction) -> str:
        tx.send("Jobs", "taken", b"again")
        return "dup"

    calls.start("leader", leader, queues=False)
    assert holding.wait(30)
    calls.start("dup", sends_a_taken_key)
    return release


def test_a_key_taken_is_reported_to_the_transaction_that_sent_it_not_its_neighbour(
    backend: PostgresBackend,
) -> None:
    backend.transact(lambda tx: tx.send("Jobs", "taken", b"x"))
    calls = Calls(backend, contended=True)  # as after serialization failures: groups
    release = _leader_then_a_taken_key(calls)

    def reads(tx: Transaction) -> str:
        tx.put_record("notes", "reader", {"seen": tx.get_record("notes", "leader") is not None})
        return "reader"

    calls.start("reader", reads)
    release.set()
    calls.join()
    assert isinstance(calls.outcomes["dup"], DuplicateKey), calls.outcomes
    assert calls.outcomes["leader"] == "leader"
    assert calls.outcomes["reader"] == "reader"
    assert backend.get_record("notes", "reader") == {"seen": True}
    assert [m.key for batch in backend.stream("Jobs", 10) for m in batch] == [("taken",)]


def test_a_failure_held_back_to_the_commit_is_its_own_transactions_not_the_last_ones(
    backend: PostgresBackend,
) -> None:
    # Neither neighbour reads: every write and check of both is held back (a
    # completion's acks are checked in SQL so, agentq.backends.postgres.checks),
    # and the group sends them together before its COMMIT. The one whose key is
    # taken gets DuplicateKey; before, the last member of the group got it and
    # the one that sent the taken key was run again and reported nothing.
    backend.transact(lambda tx: tx.send("Jobs", "taken", b"x"))
    calls = Calls(backend, contended=True)
    release = _leader_then_a_taken_key(calls)

    def writes_blind(tx: Transaction) -> str:
        tx.put_record("notes", "blind", {"ok": True})
        return "blind"

    calls.start("blind", writes_blind)
    release.set()
    calls.join()
    assert isinstance(calls.outcomes["dup"], DuplicateKey), calls.outcomes
    assert calls.outcomes["blind"] == "blind", calls.outcomes
    assert calls.outcomes["leader"] == "leader"
    assert backend.get_record("notes", "blind") == {"ok": True}


def test_a_function_that_raises_leaves_its_group_committed(backend: PostgresBackend) -> None:
    calls = Calls(backend, contended=True)
    holding, release = threading.Event(), threading.Event()

    def leader(tx: Transaction) -> None:
        tx.send("Jobs", "a", b"x")
        holding.set()
        release.wait(30)

    def fails(tx: Transaction) -> None:
        tx.send("Jobs", "never", b"x")
        raise RuntimeError("changed its mind")

    calls.start("leader", leader, queues=False)
    assert holding.wait(30)
    calls.start("fails", fails)
    calls.start("after", lambda tx: tx.send("Jobs", "b", b"x"))
    release.set()
    calls.join()
    assert isinstance(calls.outcomes["fails"], RuntimeError)
    keys = sorted(m.key for batch in backend.stream("Jobs", 10) for m in batch)
    assert keys == [("a",), ("b",)]


def test_a_group_whose_connection_is_lost_in_its_commit_runs_nobody_again(
    backend: PostgresBackend, postgres_url: str
) -> None:
    # A deferred trigger ends the group's own session inside its COMMIT: whether
    # the group committed is unknown to every member, so none may run again (an
    # enqueue without a key would then exist twice). Before, the members other
    # than the leader were told "nothing was written" and ran again alone.
    admin: Any = psycopg.connect(postgres_url, autocommit=True)
    end_sessions_at_commit(admin, "doomed")
    calls = Calls(backend, contended=True)
    holding, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def leader(tx: Transaction) -> None:
        runs.append("leader")
        tx.execute("INSERT INTO doomed VALUES (1)")
        holding.set()
        release.wait(30)

    def sends(name: str) -> Callable[[Transaction], None]:
        def fn(tx: Transaction) -> None:
            runs.append(name)
            tx.send("Jobs", name, b"x")

        return fn

    try:
        calls.start("leader", leader, queues=False)
        assert holding.wait(30)
        calls.start("a", sends("a"))
        calls.start("b", sends("b"))
        release.set()
        calls.join()
        for name in ("leader", "a", "b"):
            outcome = calls.outcomes[name]
            assert isinstance(outcome, BackendUnavailable), calls.outcomes
            assert "outcome is unknown" in str(outcome)
        assert sorted(runs) == ["a", "b", "leader"]  # each ran once
        assert admin.execute("SELECT count(*) FROM doomed").fetchone() == (0,)
        backend.transact(lambda tx: tx.send("Jobs", "after", b"x"))  # the pool recovered
    finally:
        admin.close()


def test_a_streak_of_conflicts_longer_than_the_attempts_is_still_run_again(
    backend: PostgresBackend,
) -> None:
    """A grouped transaction that conflicts more often in a row than its
    attempts (eight threads enqueueing with neighbouring idempotency keys met
    such a streak about once in 8,000 calls, within half a second) runs again
    until :data:`grouping.RETRY_SECONDS` have passed, and commits once."""
    runs: list[int] = []

    def fn(tx: Transaction) -> None:
        runs.append(1)
        tx.put_record("ledger", "k", {"run": len(runs)})
        if len(runs) <= grouping.ATTEMPTS + 2:
            tx.execute("DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END $$")

    backend._group.conflicted()  # this thread's transactions go through the group
    backend.transact(fn)
    assert len(runs) == grouping.ATTEMPTS + 3
    assert backend.get_record("ledger", "k") == {"run": len(runs)}  # the last run only


def test_eight_threads_enqueueing_with_idempotency_keys_all_succeed(
    postgres_url: str, tmp_path: Path
) -> None:
    # Keys next to each other ("call-1", "call-2", ...) put eight SERIALIZABLE
    # transactions on the same index pages: one in five aborted, and a caller
    # ran out of retries (TransactionAborted) within a few thousand calls.
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "noop.py").write_text(_TOOL)
    rt = Runtime(postgres_url, tools=tools)
    errors: list[BaseException] = []
    ids: dict[str, set[str]] = {}
    lock = threading.Lock()

    def caller(c: int) -> None:
        try:
            for i in range(60):
                key = f"call-{i}"  # every thread submits every key: one task each
                task = rt.enqueue_action("noop", {"n": i}, idempotency_key=key)
                with lock:
                    ids.setdefault(key, set()).add(task.task_id)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors[:3]
        assert len(ids) == 60 and all(len(v) == 1 for v in ids.values())
        assert rt.backend.stats("work").depth == 60
    finally:
        rt.close()
