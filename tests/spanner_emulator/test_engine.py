"""What the emulator itself checks of the Spanner backend, in both dialects: its
DDL, records, application SQL beside the runtime's writes, real aborts and the
re-runs they cause, rollback, error codes and the statistics SQL.

Queue statements go through the interposer (the emulator has none); every other
statement here is parsed, planned and run by the emulator.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, open_backend, tool
from agentq.backends import Backend, Transaction
from agentq.errors import BackendUnavailable, MessageNotFound, TransactionError
from agentq.spec import KeyColumn, KeyType, QueueSpec

from .fixtures import EmulatorDatabase

TASKS = QueueSpec("Tasks", (KeyColumn("user_id", KeyType.INT), KeyColumn("msg_id", KeyType.STR)))


def sql(db: EmulatorDatabase, googlesql: str, postgresql: str) -> str:
    return postgresql if db.postgres else googlesql


def params(db: EmulatorDatabase, **values: Any) -> Any:
    """Named parameters for GoogleSQL (@name), positional for PostgreSQL ($1...)."""
    return list(values.values()) if db.postgres else values


def create_orders(db: EmulatorDatabase) -> None:
    statement = sql(
        db,
        "CREATE TABLE Orders (OrderId INT64 NOT NULL, State STRING(MAX)) PRIMARY KEY (OrderId)",
        "CREATE TABLE orders (orderid bigint NOT NULL PRIMARY KEY, state varchar)",
    )
    db.client_database().update_ddl([statement]).result(60)  # type: ignore[attr-defined]


def order_states(backend: Backend) -> list[tuple[Any, ...]]:
    return backend.transact(lambda tx: tx.execute("SELECT OrderId, State FROM Orders"))


@pytest.fixture
def backend(emulator_database: EmulatorDatabase) -> Iterator[Backend]:
    """The backend through the interposer, queues on the test's clock."""
    clock = FakeClock()
    emulator_database.use_clock(clock)
    b = open_backend(emulator_database.url, clock=clock)
    b.apply_ddl([])  # type: ignore[attr-defined]
    yield b
    b.close()


def test_the_backends_ddl_is_the_emulators_ddl(emulator_database: EmulatorDatabase) -> None:
    """The records table straight on the emulator; a queue interleaved in a parent
    through the interposer, whose CREATE TABLE the emulator checks like Spanner."""
    db = emulator_database
    direct = open_backend(db.direct_url)
    try:
        direct.apply_ddl([])  # type: ignore[attr-defined]
    finally:
        direct.close()
    create_orders(db)
    b = open_backend(db.url)
    try:
        keys = (KeyColumn("OrderId", KeyType.INT), KeyColumn("TaskId", KeyType.STR))
        b.create_queue(QueueSpec("OrderTasks", keys, parent="Orders"))
        with db.client_database().snapshot() as snap:  # type: ignore[attr-defined]
            tables = dict(
                snap.execute_sql(
                    sql(
                        db,
                        "SELECT TABLE_NAME, PARENT_TABLE_NAME FROM INFORMATION_SCHEMA.TABLES "
                        "WHERE TABLE_SCHEMA = ''",
                        "SELECT table_name, parent_table_name FROM information_schema.tables "
                        "WHERE table_schema = 'public'",
                    )
                )
            )
        assert tables[sql(db, "OrderTasks", "ordertasks")] == sql(db, "Orders", "orders")
        assert sql(db, "agentq_records", "agentq_records") in tables
        # A child whose key does not start with the parent's key is refused, as on Spanner.
        wrong = QueueSpec("Misfiled", (KeyColumn("TaskId", KeyType.STR),), parent="Orders")
        with pytest.raises(BackendUnavailable, match="DDL"):
            b.create_queue(wrong)
    finally:
        b.close()


def test_records_read_and_write_on_the_emulator_alone(emulator_database: EmulatorDatabase) -> None:
    b = open_backend(emulator_database.direct_url)  # no interposer in the way
    try:
        b.apply_ddl([])  # type: ignore[attr-defined]
        b.transact(lambda tx: [tx.put_record("things", k, {"k": k}) for k in ("a:1", "a:2", "b")])
        assert b.get_record("things", "a:1") == {"k": "a:1"}
        assert [k for k, _ in b.list_records("things", "a:")] == ["a:1", "a:2"]
        read = b.read_records("things", ["b", "missing"])
        assert list(read) == ["b"]
        changed = b.transact(
            lambda tx: tx.replace_records("things", [("b", read["b"].version, {"k": "B"})])
        )
        assert changed == [] and b.get_record("things", "b") == {"k": "B"}
        assert b.transact(lambda tx: tx.delete_record("things", "a:2")) is True
        assert b.get_record("things", "a:2") is None
    finally:
        b.close()


class Note(BaseModel):
    order: int


@tool(queue="work")
def ship(ctx: ToolContext, args: Note) -> None:
    """A tool for the decisions below; never run here."""


def test_application_sql_commits_or_rolls_back_with_the_runtimes_writes(
    emulator_database: EmulatorDatabase,
) -> None:
    db = emulator_database
    create_orders(db)
    clock = FakeClock()
    db.use_clock(clock)
    rt = Runtime(db.url, tools=[ship], clock=clock)
    try:
        insert = sql(
            db,
            "INSERT INTO Orders (OrderId, State) VALUES (@id, @state)",
            "INSERT INTO orders (orderid, state) VALUES ($1, $2)",
        )

        def approve(tx: Any) -> str:
            tx.execute(insert, params(db, id=1, state="approved"))
            return str(tx.enqueue("ship", {"order": 1}).task_id)

        task_id = rt.transact(approve)
        assert order_states(rt.backend) == [(1, "approved")]
        assert rt.task(task_id).tool == "ship" and rt.backend.stats("work").depth == 1

        def crashes(tx: Any) -> None:
            tx.execute(insert, params(db, id=2, state="approved"))
            tx.enqueue("ship", {"order": 2})
            raise RuntimeError("the agent crashed mid-decision")

        with pytest.raises(RuntimeError):
            rt.transact(crashes)
        assert order_states(rt.backend) == [(1, "approved")]
        assert rt.backend.stats("work").depth == 1 and len(rt.tasks()) == 1
    finally:
        rt.close()


def test_two_transactions_on_one_row_abort_and_the_loser_is_re_run(backend: Backend) -> None:
    """The emulator aborts one of two read-write transactions on one row (it runs
    one at a time): the client re-runs the loser's whole function."""
    backend.transact(lambda tx: tx.put_record("counters", "c", {"n": 0}))
    both_read = threading.Barrier(2)
    calls: list[str] = []
    errors: list[BaseException] = []

    def increment(name: str) -> None:
        def fn(tx: Transaction) -> None:
            calls.append(name)
            n = (tx.get_record("counters", "c") or {})["n"]
            if calls.count(name) == 1:
                try:  # both hold a read of the row before either writes
                    both_read.wait(timeout=2)
                except threading.BrokenBarrierError:
                    pass
            tx.put_record("counters", "c", {"n": n + 1})

        try:
            backend.transact(fn)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=increment, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert backend.get_record("counters", "c") == {"n": 2}  # no lost update
    assert len(calls) >= 3  # at least one function ran again after an abort


def test_an_api_error_rolls_back_and_leaves_no_lock(
    backend: Backend, emulator_database: EmulatorDatabase
) -> None:
    backend.transact(lambda tx: tx.put_record("things", "a", {"n": 1}))

    def fails(tx: Transaction) -> None:
        tx.get_record("things", "a")  # begins the transaction on the server, with a lock
        tx.put_record("things", "a", {"n": 2})
        tx.execute("SELECT 1/0")  # OUT_OF_RANGE from the engine, mid-transaction

    rollbacks = emulator_database.env.interposer.calls["Rollback"]
    with pytest.raises(TransactionError) as caught:
        backend.transact(fails)
    assert not isinstance(caught.value, MessageNotFound)
    assert "division by zero" in str(caught.value)
    # The client library itself sends no Rollback for an API error (its locks would
    # be held until Spanner's idle timeout): the backend must.
    assert emulator_database.env.interposer.calls["Rollback"] == rollbacks + 1
    assert backend.get_record("things", "a") == {"n": 1}
    backend.transact(lambda tx: tx.put_record("things", "a", {"n": 3}))
    assert backend.get_record("things", "a") == {"n": 3}


def test_real_error_codes_are_not_taken_for_a_missing_message(
    backend: Backend, emulator_database: EmulatorDatabase
) -> None:
    db = emulator_database
    backend.create_queue(TASKS)
    backend.transact(lambda tx: tx.send("Tasks", (1, "a"), b"x"))
    missing_table = sql(
        db, "INSERT INTO NoSuchTable (Id) VALUES (1)", "INSERT INTO nosuchtable (id) VALUES (1)"
    )
    cases = {
        "SELECT 1/0": "division by zero",
        missing_table: "(?i)nosuchtable",
        "THIS IS NOT SQL": "(?i)syntax error",
    }
    for statement, message in cases.items():

        def fn(tx: Transaction, statement: str = statement) -> None:
            tx.ack("Tasks", (1, "a"))  # a strict ack of a message that exists
            tx.execute(statement)

        with pytest.raises(TransactionError, match=message) as caught:
            backend.transact(fn)
        assert not isinstance(caught.value, MessageNotFound), statement
    assert backend.stats("Tasks").depth == 1  # nothing was acknowledged
    with pytest.raises(MessageNotFound):
        backend.transact(lambda tx: tx.ack("Tasks", (9, "never sent")))


def test_the_statistics_sql_runs_on_the_engine(
    emulator_database: EmulatorDatabase,
) -> None:
    # Real time here: the statistics compare with the engine's CURRENT_TIMESTAMP.
    b = open_backend(emulator_database.url)
    try:
        b.create_queue(TASKS)
        now = b.transact(lambda tx: tx.now)

        def fill(tx: Transaction) -> None:
            tx.send("Tasks", (1, "now"), b"x")
            tx.send("Tasks", (1, "also-now"), b"x")
            tx.send("Tasks", (2, "later"), b"x", deliver_time=now + timedelta(hours=72))

        b.transact(fill)
        stats = b.stats("Tasks")
        assert (stats.depth, stats.ready, stats.scheduled) == (3, 2, 1)
        assert stats.oldest_unacked_age is not None and stats.oldest_unacked_age >= 0
    finally:
        b.close()


def test_a_long_receive_gets_a_send_committed_while_it_waits(backend: Backend) -> None:
    backend.create_queue(TASKS)
    got: list[Any] = []
    listening = threading.Event()

    def receive() -> None:
        listening.set()
        for batch in backend.stream("Tasks", 2, max_duration=1200):
            got.extend(m.key for m in batch)
            return

    t = threading.Thread(target=receive)
    t.start()
    listening.wait(5)
    for i in range(20):  # whenever the RECEIVE stands, in the lease or in the wait
        if got:
            break
        if i == 2:
            backend.transact(lambda tx: tx.send("Tasks", (1, "late"), b"x"))
        t.join(0.25)
    t.join(10)
    assert got == [(1, "late")]
