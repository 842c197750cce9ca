"""One transaction's connection, sending what needs no answer of its own together
with the next statement that does (libpq's pipeline mode).

Every round trip to the server costs a wake-up of the server process and of the
caller; on a busy machine that is most of what a short transaction costs
(measured on two loaded cores: about 1 ms each, against one WAL flush per
commit). A plain psycopg transaction sends ``BEGIN``, each statement, then
``COMMIT``, each waiting for its answer. :class:`TxConn` instead:

* holds ``BEGIN`` (with the isolation level) back and sends it in one pipeline
  with the transaction's first statement;
* sends what :meth:`TxConn.before_commit` queued (``pg_notify`` of the queues a
  transaction sent to, ``SET LOCAL synchronous_commit = off``, a lease's update)
  in one pipeline with ``COMMIT``;
* sends nothing at all for a transaction that ran no statement.

Nothing changes in what commits: the server runs the statements in order, in
the one transaction, and an error in any of them fails the pipeline (the
exception is raised where the statement was executed, or by :meth:`commit`).
A statement without parameters is sent on its own (simple protocol), so an
application's multi-statement SQL keeps working. Without a libpq that supports
pipelines (before 14) every command is sent on its own, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from psycopg.pq import TransactionStatus

from agentq.errors import TransactionError

__all__ = ["BEGIN_READ_COMMITTED", "BEGIN_SERIALIZABLE", "TxConn"]

BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE"
BEGIN_READ_COMMITTED = "BEGIN ISOLATION LEVEL READ COMMITTED"

Conn = psycopg.Connection[tuple[Any, ...]]
Command = tuple[str, Sequence[Any] | None]

_PIPELINES = psycopg.Pipeline.is_supported()


class TxConn:
    """The connection (in autocommit mode) of one explicit transaction: the
    ``execute`` and ``cursor`` of a psycopg connection, and the transaction's end."""

    def __init__(self, conn: Conn, begin: str) -> None:
        self.raw = conn
        self._pending: list[Command] = [(begin, None)]
        self._before_commit: list[Command] = []

    @property
    def sql(self) -> Conn:
        """This object where a psycopg connection is expected (it has the
        ``execute`` and ``cursor`` the backend's SQL uses)."""
        return cast(Conn, self)

    def execute(
        self, query: Any, params: Sequence[Any] | Any | None = None, **kw: Any
    ) -> psycopg.Cursor[tuple[Any, ...]]:
        """Execute ``query`` in the transaction (with ``BEGIN`` if not yet sent)."""
        if self._pending and params is not None and _PIPELINES:
            with self._pipeline():
                cur = self.raw.execute(query, params, **kw)
            return cur
        self._flush()
        return self.raw.execute(query, params, **kw)

    def cursor(self) -> psycopg.Cursor[tuple[Any, ...]]:
        """A cursor of the transaction (``BEGIN`` sent first if not yet)."""
        self._flush()
        return self.raw.cursor()

    def before_commit(self, query: str, params: Sequence[Any] | None = None) -> None:
        """Run ``query`` just before ``COMMIT``, in the same round trip (its
        result is not read; an error fails the commit)."""
        self._before_commit.append((query, params))

    def commit(self, *, durable: bool = True) -> None:
        """Commit (``durable=False``: without waiting for the WAL flush, this
        transaction only). Raises :class:`TransactionError` if an earlier
        statement failed and the caller went on: the server has rolled the
        whole transaction back, so reporting success would lose it."""
        if self._pending and not self._before_commit:
            self._pending = []
            return  # nothing was sent: nothing to commit
        if not self._pending and self.raw.info.transaction_status == TransactionStatus.INERROR:
            self.rollback()
            raise TransactionError(
                "a statement of this transaction failed and the function went on: "
                "PostgreSQL rolled the whole transaction back, nothing was committed "
                "(let the error propagate, or run the statement that may fail in a "
                "savepoint)"
            )
        tail = [*self._pending, *self._before_commit]
        if not durable:
            tail.append(("SET LOCAL synchronous_commit = off", None))
        self._pending, self._before_commit = [], []
        if _PIPELINES and tail:
            with self.raw.pipeline():
                for query, params in tail:
                    self.raw.execute(query, params)
                done = self.raw.execute("COMMIT")
        else:
            for query, params in tail:
                self.raw.execute(query, params)
            done = self.raw.execute("COMMIT")
        if done.statusmessage != "COMMIT":  # "ROLLBACK": the server did not commit
            raise TransactionError(f"PostgreSQL answered {done.statusmessage!r} to COMMIT")

    def rollback(self) -> None:
        """Roll back whatever was sent (nothing to do if nothing was)."""
        self._pending = []
        self._before_commit = []
        if self.raw.closed or self.raw.broken:
            return
        if self.raw.info.transaction_status != TransactionStatus.IDLE:
            self.raw.execute("ROLLBACK")

    def _flush(self) -> None:
        """Send the held-back commands now (one round trip)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if _PIPELINES and len(pending) > 1:
            with self.raw.pipeline():
                for query, params in pending:
                    self.raw.execute(query, params)
        else:
            for query, params in pending:
                self.raw.execute(query, params)

    @contextmanager
    def _pipeline(self) -> Iterator[None]:
        pending, self._pending = self._pending, []
        with self.raw.pipeline():
            for query, params in pending:
                self.raw.execute(query, params)
            yield
