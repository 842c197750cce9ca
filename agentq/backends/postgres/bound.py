"""A transaction of the application's own connection, carrying agentq's writes
(River's ``InsertTx``): :func:`bind` checks the connection and returns the
:class:`BoundTransaction` a :class:`~agentq.decision.Decision` runs on.

The application begins and commits (or rolls back) the transaction; agentq never
does. So the wake-up a send owes its queue is ``pg_notify``'d at the send, not
before a commit agentq does not see: PostgreSQL delivers it only if the
transaction commits (and once per queue and transaction). A failed send or
strict ack makes the server abort the transaction, so the application's commit
cannot keep half a decision.

Accepted: a psycopg 3 ``Connection`` or ``Cursor`` (autocommit off, or inside
``conn.transaction()``), an SQLAlchemy 2 ``Session`` or ``Connection`` over the
``postgresql+psycopg`` driver (imported only when one is passed), and the sync
session an ``AsyncSession.run_sync`` hands its function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, cast

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from agentq.backends.postgres.connection import Conn
from agentq.backends.postgres.driver_errors import mapped
from agentq.backends.postgres.queues import QueueSQL
from agentq.backends.postgres.records import Records
from agentq.backends.postgres.schema import qualified
from agentq.backends.postgres.transaction import PostgresTransaction
from agentq.backends.postgres.wakeups import payload as notice
from agentq.errors import SharedTransactionError, TransactionError

__all__ = ["BoundTransaction", "bind", "psycopg_connection"]

#: Raised by the server into a doomed transaction: every later statement, and the
#: commit, then fail or roll back (PostgreSQL has no "rollback only" flag).
_POISON = (
    "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '25P02', MESSAGE = "
    "'agentq: a send or acknowledgement of this transaction failed; roll it back'; END $$"
)


class _TupleRows:
    """The application's connection with agentq's row shape: the application may
    have set another ``row_factory`` (``dict_row``) that agentq's reads do not expect."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def cursor(self) -> psycopg.Cursor[tuple[Any, ...]]:
        return self._conn.cursor(row_factory=tuple_row)

    def execute(self, query: Any, params: Any = None, **kw: Any) -> psycopg.Cursor[tuple[Any, ...]]:
        return self.cursor().execute(query, params, **kw)


class _RunSync:
    """An async psycopg connection under SQLAlchemy's ``AsyncSession.run_sync``,
    driven through SQLAlchemy's greenlet adapter (its DBAPI connection), which
    awaits each statement on the session's event loop."""

    def __init__(self, dbapi: Any) -> None:
        self._dbapi = dbapi
        self.info = dbapi.info
        self.closed = dbapi.closed
        self.autocommit = dbapi.autocommit

    def cursor(self) -> Any:
        return self._dbapi.cursor()

    def execute(self, query: Any, params: Any = None) -> Any:
        cur = self.cursor()
        cur.execute(query, params)
        return cur


class BoundTransaction(PostgresTransaction):
    """A :class:`PostgresTransaction` on the application's connection."""

    def __init__(
        self,
        conn: Conn,
        now: int,
        queue_sql: Callable[[str, Conn], QueueSQL],
        records: Records,
        channel: str | None,
        isolation: str,
    ) -> None:
        super().__init__(conn, now, queue_sql, records)
        self._channel = channel
        #: The application's isolation level (``current_setting('transaction_isolation')``).
        self.isolation = isolation

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One decision operation in a savepoint: if it raises, its writes (and
        wake-ups: PostgreSQL drops those of a rolled-back savepoint) are undone
        and the application's transaction goes on as before it, still usable."""
        sent = set(self.sent)
        self._conn.execute("SAVEPOINT agentq_decision")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK TO SAVEPOINT agentq_decision")
            self._conn.execute("RELEASE SAVEPOINT agentq_decision")
            self.sent, self.doomed = sent, None
            raise
        self._conn.execute("RELEASE SAVEPOINT agentq_decision")

    def require_serializable(self, what: str) -> None:
        """Refuse ``what`` below SERIALIZABLE: it reads a record and writes it back
        (an idempotency key, an ordering key's queue, an approval, a task's state),
        and at READ COMMITTED two transactions side by side would both act on the
        old value (two tasks for one key, a task left waiting forever)."""
        if self.isolation != "serializable":
            raise SharedTransactionError(
                f"{what} needs the application's transaction at SERIALIZABLE (it is "
                f"{self.isolation.upper()}): begin it with conn.isolation_level = "
                "psycopg.IsolationLevel.SERIALIZABLE, or SQLAlchemy's "
                'execution_options(isolation_level="SERIALIZABLE"), and retry it on a '
                "serialization failure"
            )

    def send(
        self,
        queue: str,
        key: Sequence[Any] | Any,
        payload: Any,
        deliver_time: datetime | None = None,
    ) -> None:
        fresh = queue not in self.sent
        super().send(queue, key, payload, deliver_time)
        if fresh and self._channel is not None:
            self._conn.execute("SELECT pg_notify(%s, %s)", (self._channel, notice({queue})))

    def _doom(self, exc: TransactionError) -> TransactionError:
        try:
            self._conn.execute(_POISON)
        except psycopg.Error:
            pass  # aborted now, as intended
        return super()._doom(exc)


def psycopg_connection(obj: Any) -> psycopg.Connection[Any] | _RunSync:
    """The psycopg 3 connection under ``obj`` (a connection, cursor, or an
    SQLAlchemy 2 session or connection); :class:`SharedTransactionError` otherwise."""
    if isinstance(obj, psycopg.Connection):
        return obj
    if isinstance(obj, psycopg.Cursor):
        return obj.connection
    if isinstance(obj, psycopg.AsyncConnection | psycopg.AsyncCursor):
        raise SharedTransactionError(
            "an async psycopg connection cannot carry a decision: agentq's writes are "
            "synchronous; pass a psycopg.Connection (or use Runtime.transact)"
        )
    if type(obj).__module__.startswith("sqlalchemy"):
        return _from_sqlalchemy(obj)
    kind = type(obj)
    # Qualified: a sqlite3.Connection was "not Connection", the type asked for.
    name = kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}"
    )
    raise SharedTransactionError(
        "Runtime.decision takes a psycopg 3 Connection or Cursor, or an SQLAlchemy "
        f"Session or Connection, to this runtime's PostgreSQL database; not a {name}"
    )


def _from_sqlalchemy(obj: Any) -> psycopg.Connection[Any] | _RunSync:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    if isinstance(obj, Session):
        obj = obj.connection()  # begins the session's transaction if it has none
    if not isinstance(obj, Connection):
        raise SharedTransactionError(
            f"an SQLAlchemy {type(obj).__name__} cannot carry a decision: pass a "
            "Session or Connection; with an AsyncSession, the sync session of "
            "await session.run_sync(lambda s: rt.decision(s).enqueue(...))"
        )
    if not obj.in_transaction():
        obj.begin()  # SQLAlchemy 2 autobegins on first use; commit() ends it
    driver = obj.connection.driver_connection
    if isinstance(driver, psycopg.AsyncConnection):
        return _RunSync(obj.connection.dbapi_connection)  # inside AsyncSession.run_sync
    if not isinstance(driver, psycopg.Connection):
        raise SharedTransactionError(
            f"the SQLAlchemy connection uses the {obj.dialect.driver!r} driver; agentq "
            "joins only psycopg 3 transactions (a URL of postgresql+psycopg://)"
        )
    return driver


def bind(
    obj: Any,
    now: int,
    schema: str,
    queue_sql: Callable[[str, Conn], QueueSQL],
    records: Records,
    channel: str | None,
) -> BoundTransaction:
    """A transaction on the application's connection, after checking that it is in
    (or will begin) a transaction it commits itself, on a database holding this
    runtime's schema."""
    conn = psycopg_connection(obj)
    if conn.closed:
        raise SharedTransactionError("the connection is closed")
    status = conn.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise SharedTransactionError(
            "the connection's transaction has failed already: roll it back first"
        )
    if status == TransactionStatus.IDLE and conn.autocommit:
        raise SharedTransactionError(
            "the connection is in autocommit mode with no transaction open, so each "
            "write would commit alone: begin one first (with conn.transaction(): ...) "
            "or connect with autocommit=False"
        )
    if status not in (TransactionStatus.IDLE, TransactionStatus.INTRANS):
        raise SharedTransactionError(f"the connection is busy ({status.name})")
    tuples = cast(Conn, _TupleRows(conn) if isinstance(conn, psycopg.Connection) else conn)
    try:
        found = tuples.execute(
            "SELECT to_regclass(%s), current_setting('transaction_isolation')",
            (qualified(schema, "records"),),
        ).fetchone()
    except psycopg.Error as exc:
        raise mapped(exc, conn.info.host, "checking the application's connection") from exc
    if found is None or found[0] is None:
        raise SharedTransactionError(
            f"database {conn.info.dbname!r} of this connection has no agentq schema "
            f"{schema!r}: the connection must be to the runtime's own database"
        )
    return BoundTransaction(tuples, now, queue_sql, records, channel, str(found[1]))
