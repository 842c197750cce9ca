"""agentq's hottest statements are prepared on each pooled connection, once
(issue 38, item 2: server-side prepared statements where no pooler forbids
them), so the server neither parses nor plans them at every batch; behind a
transaction-pooling pooler (``pooler=transaction``) nothing is prepared.

Read off the server (``pg_prepared_statements`` of the pool's one connection),
never timed.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import Runtime, ToolContext, tool  # noqa: E402
from agentq.backends.postgres import PostgresBackend, prepared  # noqa: E402
from agentq.clock import FakeClock  # noqa: E402


class Args(BaseModel):
    n: int


@tool(queue="work")
def noop(ctx: ToolContext, args: Args) -> int:
    return args.n


def _runtime(url: str) -> Runtime:
    return Runtime(url, tools=[noop], clock=FakeClock())


@pytest.fixture
def rt(postgres_url: str) -> Iterator[Runtime]:
    runtime = _runtime(postgres_url + "?pool_size=1")
    try:
        yield runtime
    finally:
        runtime.close()


def _prepared_here(rt: Runtime) -> dict[str, tuple[str, int, int]]:
    """The pool's one connection's prepared statements: name to (text, generic
    plans, custom plans)."""
    assert isinstance(rt.backend, PostgresBackend)

    def read(conn: Any) -> list[tuple[Any, ...]]:
        return conn.execute(
            "SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall()

    rows = rt.backend._db.read(read)
    return {name: (text, generic, custom) for name, text, generic, custom in rows}


def _drain_batches(rt: Runtime, batches: int, size: int) -> None:
    worker = rt.worker(concurrency=size, batch_size=size)
    for b in range(batches):
        for i in range(size):
            rt.enqueue_action("noop", {"n": b * size + i})
        assert worker.drain() == size


def test_a_worker_prepares_its_statements_once_and_plans_its_lease_once(rt: Runtime) -> None:
    _drain_batches(rt, batches=8, size=4)
    found = _prepared_here(rt)
    texts = {name: text for text, name in prepared._names.items()}
    # Server names are the statement's name and a generation: agentq_<hash>_0.
    here = {server: texts[server.rpartition("_")[0]] for server in found}
    leases = {server: found[server][1:] for server, text in here.items() if "SKIP LOCKED" in text}
    # Every lease statement (the work queue's, and those of agentq's own queues
    # the worker receives from) on its one generic plan, never planned anew for
    # its values; the work queue's ran at least nine times (eight batches, then
    # the lease that finds nothing).
    assert leases and all(custom == 0 for _, custom in leases.values()), leases
    assert max(generic for generic, _ in leases.values()) >= 9, leases
    kinds = " ".join(here.values())
    for part in ("INSERT INTO", "DELETE FROM", "UPDATE", "pg_notify"):
        assert part in kinds, (part, kinds)  # enqueue, ack, claim and wake-up too
    # Each under one name: nothing prepared twice on the connection.
    assert len(set(here.values())) == len(here), here


def test_behind_a_transaction_pooler_nothing_is_prepared(postgres_url: str) -> None:
    runtime = _runtime(postgres_url + "?pool_size=1&pooler=transaction")
    try:
        _drain_batches(runtime, batches=2, size=4)
        assert _prepared_here(runtime) == {}
        assert all(t.status == "succeeded" for t in runtime.tasks())
    finally:
        runtime.close()


def test_statements_dropped_under_it_stop_preparing_and_lose_nothing(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """An application that runs DEALLOCATE ALL in its transaction: the next
    transaction that relied on them meets a missing statement, is run again
    (nothing of the first attempt committed: one task, not two) without
    prepared statements, and agentq says so once and prepares none from then on."""
    _drain_batches(rt, batches=1, size=2)
    assert _prepared_here(rt)

    def deallocate(tx: Any) -> None:
        tx.execute("DEALLOCATE ALL")

    rt.transact(deallocate)
    assert _prepared_here(rt) == {}
    with caplog.at_level(logging.WARNING, logger="agentq.backends.postgres"):
        task = rt.enqueue_action("noop", {"n": 99})
        tasks = [t for t in rt.tasks() if t.args == {"n": 99}]
        assert [t.task_id for t in tasks] == [task.task_id]  # once, not twice
        assert rt.worker(concurrency=1).drain() == 1
        assert rt.task(task.task_id).status == "succeeded"
        _drain_batches(rt, batches=2, size=2)
    warned = [r.getMessage() for r in caplog.records if "no longer prepares" in r.getMessage()]
    assert len(warned) == 1 and "pooler=transaction" in warned[0], warned
    assert "does not exist" in warned[0]
    assert _prepared_here(rt) == {}


def test_behind_a_transaction_pooler_agentq_was_not_told_of_everything_runs(
    pgbouncer_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PgBouncer in transaction mode (fewer server connections than the pool's)
    without ``pooler=transaction``: a statement prepared on one server
    connection is missing on the next, preparing stops with one warning that
    names the option, and every task runs once."""
    runtime = _runtime(pgbouncer_url + "?pool_size=6")
    n = 24
    try:
        with caplog.at_level(logging.WARNING, logger="agentq.backends.postgres"):
            threads = [
                threading.Thread(
                    target=lambda k=k: [
                        runtime.enqueue_action("noop", {"n": k * 100 + i}) for i in range(n // 4)
                    ]
                )
                for k in range(4)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert runtime.worker(concurrency=4, batch_size=4).drain() == n
        warned = [r.getMessage() for r in caplog.records if "no longer prepares" in r.getMessage()]
        assert len(warned) == 1 and "add pooler=transaction" in warned[0], warned
        done = runtime.tasks()
        assert len(done) == n and all(t.status == "succeeded" for t in done)
        assert len({t.args["n"] for t in done}) == n
    finally:
        runtime.close()


def test_a_statement_has_one_name_in_every_process() -> None:
    """Names come from the text: behind a pooler another process's statement of
    the same name is the same statement."""
    text = 'SELECT %s::bigint AS "one name"'
    here = prepared.prepared(text)
    assert isinstance(here, prepared.Prepared)
    there = subprocess.run(
        [sys.executable, "-c",
         "import sys; from agentq.backends.postgres.prepared import prepared; "
         "print(prepared(sys.argv[1]).name)", text],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert there == here.name
    other = prepared.prepared(text + " ")
    assert isinstance(other, prepared.Prepared) and other.name != here.name


def test_a_text_that_failed_prepares_again_under_a_new_name() -> None:
    session = prepared.Session()
    statement = prepared.prepared("SELECT %s::int AS test_only_statement")
    assert isinstance(statement, prepared.Prepared)
    first = session.use(statement)
    assert first is not None and first[1]  # to prepare
    assert session.use(statement) == (first[0], False)  # prepared: executed by name
    session.forget([statement.name])  # the text that prepared it failed
    again = session.use(statement)
    assert again is not None and again[1] and again[0] != first[0]


def test_a_session_prepares_at_most_its_limit() -> None:
    session = prepared.Session()
    for n in range(prepared.MAX_PER_SESSION):
        s = prepared.prepared(f"SELECT %s::int AS limit_{n}")
        assert isinstance(s, prepared.Prepared) and session.use(s) is not None
    extra = prepared.prepared("SELECT %s::int AS one_too_many")
    assert isinstance(extra, prepared.Prepared) and session.use(extra) is None


def test_a_text_that_is_not_inlined_counts_nothing_as_prepared(postgres_url: str) -> None:
    """A text given up before it is sent (a value the client cannot quote, here
    a float) leaves its statements unprepared, not counted as prepared: the
    next text prepares them, and no EXECUTE meets a missing statement."""
    from agentq.backends.postgres.inline import inlined

    marked = prepared.prepared("SELECT %s::int + 1 AS not_inlined_check")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        prepared.enable(conn, prepared.Switch())
        assert inlined(conn, [(marked, (1,)), ("SELECT %s", (1.5,))]) is None
        text = inlined(conn, [(marked, (2,))])
        assert text is not None and text.startswith(b"PREPARE "), text
        cur = conn.execute(text)
        cur.nextset()  # past the PREPARE's result
        assert cur.fetchall() == [(3,)]
