"""``Runtime.decision(connection)``: agentq's writes in the application's own
transaction (River's ``InsertTx``), on a psycopg 3 connection or an SQLAlchemy
session. The tasks, their messages and approvals exist if and only if the
application's commit succeeds."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, retry_serializable, tool
from agentq.errors import DuplicateKey, SharedTransactionError

psycopg = pytest.importorskip("psycopg")

RAN: list[str] = []
_lock = threading.Lock()


class RefundArgs(BaseModel):
    order_id: str
    amount: float


@tool(queue="work")
def refund(ctx: ToolContext, args: RefundArgs) -> dict[str, Any]:
    with _lock:
        RAN.append(args.order_id)
    return {"refunded": args.amount}


@tool(queue="work", requires_approval=True)
def close_account(ctx: ToolContext, args: RefundArgs) -> None:
    with _lock:
        RAN.append(f"closed {args.order_id}")


class AppError(Exception):
    """The application's own failure after the enqueue."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rt(postgres_url: str, clock: FakeClock) -> Iterator[Runtime]:
    RAN.clear()
    runtime = Runtime(postgres_url, tools=[refund, close_account], clock=clock)
    with psycopg.connect(postgres_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE public.orders (id text PRIMARY KEY, state text NOT NULL)")
        setup.execute("INSERT INTO public.orders VALUES ('o1', 'open'), ('o2', 'open')")
    yield runtime
    runtime.close()


def _state(url: str, order: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        return str(conn.execute("SELECT state FROM orders WHERE id = %s", (order,)).fetchone()[0])


def _nothing_recorded(rt: Runtime) -> None:
    assert rt.tasks() == []
    assert rt.approvals() == []
    assert rt.backend.stats("work").depth == 0


def _decide(conn: Any, rt: Runtime, order: str, **options: Any) -> None:
    conn.execute("UPDATE orders SET state = 'refunding' WHERE id = %s", (order,))
    tx = rt.decision(conn)
    tx.enqueue("refund", {"order_id": order, "amount": 30}, **options)
    tx.enqueue("close_account", {"order_id": order, "amount": 0})  # an approval


def test_a_rollback_leaves_no_task_message_or_approval(rt: Runtime, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        _decide(conn, rt, "o1")
        assert len(rt.tasks()) == 0  # not visible before the commit either
        conn.rollback()
    _nothing_recorded(rt)
    assert _state(postgres_url, "o1") == "open"
    assert rt.worker().drain() == 0 and RAN == []


def test_a_commit_makes_the_worker_run_the_task(rt: Runtime, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE  # for the idempotency key
        _decide(conn, rt, "o1", idempotency_key="refund-o1")
        conn.commit()
    assert _state(postgres_url, "o1") == "refunding"
    assert len(rt.approvals()) == 1 and rt.backend.stats("work").depth == 1
    assert rt.worker().drain() == 1
    assert RAN == ["o1"]
    # The idempotency key was committed with it: the same call finds the same task.
    again = rt.submit("refund", {"order_id": "o1", "amount": 30}, idempotency_key="refund-o1")
    assert not again.created


def test_an_application_error_after_the_enqueue_rolls_everything_back(
    rt: Runtime, postgres_url: str
) -> None:
    with (
        psycopg.connect(postgres_url, autocommit=True) as conn,
        pytest.raises(AppError),
        conn.transaction(),
    ):
        _decide(conn, rt, "o1")
        raise AppError("the payment provider said no")
    _nothing_recorded(rt)
    assert _state(postgres_url, "o1") == "open"


def test_the_wake_up_is_sent_only_by_the_applications_commit(
    rt: Runtime, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{rt.backend._channel}"')  # type: ignore[attr-defined]
        with psycopg.connect(postgres_url) as conn:
            _decide(conn, rt, "o1")
            conn.rollback()
        # Notifications arrive in commit order: the marker comes first unless the
        # rolled-back decision's wake-up got out.
        listener.execute("SELECT pg_notify(%s, 'marker')", (rt.backend._channel,))  # type: ignore[attr-defined]
        with psycopg.connect(postgres_url) as conn:
            _decide(conn, rt, "o2")
            conn.commit()
        # The approval's escalation timer wakes its own queue.
        got = [n.payload for n in listener.notifies(timeout=30, stop_after=3)]
    assert got[0] == "marker" and sorted(got[1:]) == ["escalations", "work"]


def test_read_then_write_decisions_need_a_serializable_transaction(
    rt: Runtime, postgres_url: str
) -> None:
    # At READ COMMITTED two transactions with one idempotency key would both
    # find none and make two tasks: refused before anything is written.
    with psycopg.connect(postgres_url) as conn:
        tx = rt.decision(conn)
        with pytest.raises(SharedTransactionError, match=r"idempotency_key.*READ COMMITTED"):
            tx.enqueue("refund", {"order_id": "o1", "amount": 1}, idempotency_key="k")
        approval = tx.enqueue("close_account", {"order_id": "o1", "amount": 0})
        with pytest.raises(SharedTransactionError, match="an approval's decision"):
            tx.approve(str(approval.approval_id), by="fiona")
        with pytest.raises(SharedTransactionError, match="a cancel"):
            tx.cancel(approval.task_id)
        conn.rollback()
    _nothing_recorded(rt)


def test_an_enqueue_that_fails_part_way_leaves_nothing_and_the_transaction_usable(
    rt: Runtime, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentq.lifecycle import dedupe

    def broken(*args: Any, **kw: Any) -> None:
        raise AppError("failed after the task's first writes")

    with psycopg.connect(postgres_url) as conn:
        conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE  # for the dedupe key
        tx = rt.decision(conn)
        with monkeypatch.context() as patch:
            patch.setattr(dedupe, "remember", broken)  # runs after the task is written
            with pytest.raises(AppError):
                tx.enqueue("refund", {"order_id": "o1", "amount": 1}, dedupe_key="o1")
        kept = tx.enqueue("refund", {"order_id": "o2", "amount": 2})
        conn.execute("UPDATE orders SET state = 'refunding' WHERE id = 'o2'")
        conn.commit()
    assert [t.task_id for t in rt.tasks()] == [kept.task_id]
    assert rt.backend.stats("work").depth == 1
    assert rt.worker().drain() == 1 and RAN == ["o2"]


def test_a_cursor_with_dict_rows_works_too(rt: Runtime, postgres_url: str) -> None:
    from psycopg.rows import dict_row

    with psycopg.connect(postgres_url, row_factory=dict_row) as conn, conn.cursor() as cur:
        _decide(cur, rt, "o2")
        conn.commit()
    assert rt.worker().drain() == 1 and RAN == ["o2"]


def test_a_failed_send_dooms_the_applications_transaction(rt: Runtime, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        tx = rt.decision(conn)
        tx.tx.send("work", ("same-key", 1), {"x": 1})
        with pytest.raises(DuplicateKey):
            tx.tx.send("work", ("same-key", 1), {"x": 2})
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("SELECT 1")
        conn.rollback()
    assert rt.backend.stats("work").depth == 0


def _in_two_threads(app: Callable[[str, Callable[[], object]], None]) -> None:
    """``app(order, enqueued)`` for o1 and o2, each in a thread of its own;
    ``enqueued()`` returns once both have enqueued, so neither commits before the
    other's transaction is open beside it. Fails with the first thread's error."""
    both_enqueued = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def run(order: str) -> None:
        try:
            app(order, both_enqueued.wait)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            both_enqueued.abort()

    threads = [threading.Thread(target=run, args=(o,)) for o in ("o1", "o2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and errors == []


def test_two_threads_each_with_their_own_connection_both_commit(
    rt: Runtime, postgres_url: str
) -> None:
    def app(order: str, enqueued: Callable[[], object]) -> None:
        with psycopg.connect(postgres_url) as conn:
            _decide(conn, rt, order)
            enqueued()
            conn.commit()

    _in_two_threads(app)
    assert len(rt.approvals()) == 2
    assert rt.worker().drain() == 2
    assert sorted(RAN) == ["o1", "o2"]


# -- SQLAlchemy ------------------------------------------------------------------


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Any]:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    eng = sqlalchemy.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    yield eng
    eng.dispose()


def test_an_sqlalchemy_session_commits_and_rolls_back_with_the_decision(
    rt: Runtime, engine: Any, postgres_url: str
) -> None:
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    with Session(engine) as session:
        session.execute(text("UPDATE orders SET state = 'refunding' WHERE id = 'o1'"))
        rt.decision(session).enqueue("refund", {"order_id": "o1", "amount": 30})
        session.rollback()
    _nothing_recorded(rt)
    with pytest.raises(AppError), Session(engine) as session, session.begin():
        rt.decision(session).enqueue("refund", {"order_id": "o1", "amount": 30})
        raise AppError("after the enqueue")
    _nothing_recorded(rt)
    with Session(engine) as session:
        session.execute(text("UPDATE orders SET state = 'refunding' WHERE id = 'o1'"))
        rt.decision(session).enqueue("refund", {"order_id": "o1", "amount": 30})
        session.commit()
    assert _state(postgres_url, "o1") == "refunding"
    assert rt.worker().drain() == 1 and RAN == ["o1"]


def test_two_threads_each_with_their_own_session_both_commit(rt: Runtime, engine: Any) -> None:
    from sqlalchemy.orm import Session

    def app(order: str, enqueued: Callable[[], object]) -> None:
        with Session(engine) as session, engine.connect() as conn:
            # One thread through a Session, the other through a Connection.
            target: Any = session if order == "o1" else conn
            rt.decision(target).enqueue("refund", {"order_id": order, "amount": 1})
            enqueued()
            target.commit()

    _in_two_threads(app)
    assert rt.worker().drain() == 2 and sorted(RAN) == ["o1", "o2"]


def test_an_async_session_decides_through_run_sync(rt: Runtime, postgres_url: str) -> None:
    import asyncio

    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio needs greenlet")
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def app() -> None:
        eng = create_async_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
        try:
            async with AsyncSession(eng) as session:
                await session.execute(text("UPDATE orders SET state = 'refunding' WHERE id = 'o1'"))
                await session.run_sync(
                    lambda s: rt.decision(s).enqueue("refund", {"order_id": "o1", "amount": 3})
                )
                await session.rollback()
            assert rt.tasks() == []
            async with AsyncSession(eng) as session:
                await session.run_sync(
                    lambda s: rt.decision(s).enqueue("refund", {"order_id": "o2", "amount": 4})
                )
                await session.commit()
        finally:
            await eng.dispose()

    asyncio.run(app())
    assert _state(postgres_url, "o1") == "open"
    assert rt.worker().drain() == 1 and RAN == ["o2"]


def test_an_async_session_itself_is_refused_with_the_way_round(
    rt: Runtime, postgres_url: str
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    eng = create_async_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with pytest.raises(SharedTransactionError, match="run_sync"):
        rt.decision(AsyncSession(eng))


# -- refusals --------------------------------------------------------------------


def test_an_autocommit_connection_outside_a_transaction_is_refused(
    rt: Runtime, postgres_url: str
) -> None:
    with (
        psycopg.connect(postgres_url, autocommit=True) as conn,
        pytest.raises(SharedTransactionError, match="autocommit"),
    ):
        rt.decision(conn)


def test_a_connection_to_another_database_is_refused(
    rt: Runtime, postgres_url_factory: Any
) -> None:
    other = postgres_url_factory.create()
    with (
        psycopg.connect(other) as conn,
        pytest.raises(SharedTransactionError, match="no agentq schema 'agentq'"),
    ):
        rt.decision(conn)


def test_a_sqlite_runtime_refuses_and_says_why(tmp_path: Path, clock: FakeClock) -> None:
    url = tmp_path / "agentq.db"
    with Runtime(f"sqlite:///{url}", tools=[refund], clock=clock) as runtime:
        conn = sqlite3.connect(url)
        try:
            with pytest.raises(SharedTransactionError, match="single writer connection"):
                runtime.decision(conn)
        finally:
            conn.close()


def _serializable(url: str) -> Any:
    conn = psycopg.connect(url)
    conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
    return conn


def test_retry_serializable_carries_the_applications_transaction_past_a_worker(
    postgres_url: str,
) -> None:
    """Issue 39, item 2.8: enqueueing or approving in the application's own
    SERIALIZABLE transaction failed with SerializationFailure on the first try
    while a worker was starting; retry_serializable runs it again."""
    RAN.clear()
    runtime = Runtime(postgres_url, tools=[refund, close_account])
    with psycopg.connect(postgres_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE public.orders (id text PRIMARY KEY, state text NOT NULL)")
        setup.execute(
            "INSERT INTO public.orders SELECT 'o' || i, 'open' FROM generate_series(0, 9) i"
        )
    stop = threading.Event()
    worker = threading.Thread(target=runtime.worker(concurrency=2).run, args=(stop,))
    worker.start()
    try:
        for i in range(5):

            def decide(i: int = i) -> Any:
                with _serializable(postgres_url) as conn, conn.transaction():
                    conn.execute("UPDATE orders SET state = 'refunding' WHERE id = %s", (f"o{i}",))
                    tx = runtime.decision(conn)
                    tx.enqueue("refund", {"order_id": f"o{i}", "amount": 30},
                               idempotency_key=f"refund:o{i}")  # fmt: skip
                    return tx.enqueue("close_account", {"order_id": f"o{i}", "amount": 0})

            asked = retry_serializable(decide)

            def approve(approval_id: str = str(asked.approval_id)) -> None:
                with _serializable(postgres_url) as conn, conn.transaction():
                    runtime.decision(conn).approve(approval_id, by="alice")

            retry_serializable(approve)
        deadline = time.monotonic() + 30
        while len(RAN) < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        worker.join(30)
        runtime.close()
    assert sorted(RAN) == sorted([f"o{i}" for i in range(5)] + [f"closed o{i}" for i in range(5)])


def _started(runtime: Runtime, deadline: float) -> bool:
    """The worker's start-up writes are committed: its tools' catalog, its
    heartbeat record and the pruning claim."""
    backend = runtime.backend
    while time.monotonic() < deadline:
        if (
            backend.get_record("pruner", "claim") is not None
            and backend.list_records("workers")
            and backend.get_record("tool_catalog", "refund") is not None
        ):
            return True
        time.sleep(0.02)
    return False


def test_a_starting_worker_aborts_no_application_transaction_beside_it(
    postgres_url: str,
) -> None:
    """Issue 39, item 2.8: a worker's start-up and bookkeeping (its tools'
    catalog, heartbeat, pruning claim) were SERIALIZABLE transactions that read
    and wrote the records' index pages, so an application's SERIALIZABLE
    transaction open beside them failed with SerializationFailure on its first
    try (5 of 5 here). They are fenced now (READ COMMITTED, each write locking
    and re-checking its row) and take part in no serializable conflict."""
    RAN.clear()
    runtime = Runtime(postgres_url, tools=[refund, close_account])
    with psycopg.connect(postgres_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE public.orders (id text PRIMARY KEY, state text NOT NULL)")
        setup.execute("INSERT INTO orders SELECT 'o' || i, 'open' FROM generate_series(0, 4) i")
    apps = []
    for i in range(5):  # each has read and written records before the worker starts
        conn = _serializable(postgres_url)
        conn.execute("UPDATE orders SET state = 'refunding' WHERE id = %s", (f"o{i}",))
        runtime.decision(conn).enqueue(
            "refund", {"order_id": f"o{i}", "amount": 30}, idempotency_key=f"refund:o{i}"
        )
        apps.append(conn)
    stop = threading.Event()
    # It serves another queue: the refunds run after the commits, so that what is
    # tested is the worker's own start-up and bookkeeping writes (a completion
    # beside a transaction may still conflict: retry_serializable is for that).
    serving = runtime.worker(queues=["escalations"], concurrency=2)
    worker = threading.Thread(target=serving.run, args=(stop,))
    worker.start()
    failed: list[str] = []
    try:
        assert _started(runtime, time.monotonic() + 30)
        for conn in apps:
            try:
                conn.commit()  # the first and only try
            except psycopg.errors.SerializationFailure as exc:
                failed.append(str(exc.diag.message_detail))
    finally:
        for conn in apps:
            conn.close()
        stop.set()
        worker.join(30)
    try:
        assert failed == []
        assert runtime.worker().drain() == 5
        assert sorted(RAN) == [f"o{i}" for i in range(5)]
    finally:
        runtime.close()


def test_a_sqlite3_connection_is_named_as_one(rt: Runtime) -> None:
    """Issue 39, 2.12: a ``sqlite3.Connection`` (to ``:memory:``) was refused as
    "not Connection", the name of the very type the message asks for."""
    conn = sqlite3.connect(":memory:")
    try:
        with pytest.raises(SharedTransactionError) as raised:
            rt.decision(conn)
    finally:
        conn.close()
    message = str(raised.value)
    assert "not a sqlite3.Connection" in message, message
    assert "this runtime's PostgreSQL database" in message, message
