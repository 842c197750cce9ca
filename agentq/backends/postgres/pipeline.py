"""One transaction's connection, sending what needs no answer of its own together
with the next statement that does (libpq's pipeline mode).

Every round trip to the server costs a wake-up of the server process and of the
caller; on a busy machine that is most of what a short transaction costs
(measured on two loaded cores: about 1 ms each, against one WAL flush per
commit). A plain psycopg transaction sends ``BEGIN``, each statement, then
``COMMIT``, each waiting for its answer. :class:`TxConn` instead holds back

* ``BEGIN`` (with the isolation level),
* the writes whose answer nobody reads (:meth:`TxConn.defer`: a record put, a
  message sent),
* what must run just before ``COMMIT`` (:meth:`TxConn.before_commit`:
  ``pg_notify`` of the queues a transaction sent to, a lease's update),

and sends them in one pipeline with the next statement whose answer is read,
or with ``COMMIT``. A decision that enqueues a task is then one round trip:
``BEGIN``, the ledger record, the message, the notification and ``COMMIT``
together. A transaction that ran no statement sends nothing at all.

Nothing changes in what commits: the server runs the statements in order, in
the one transaction, and reads see the writes held back before them (they go
first). What moves is where a failed write is reported: with the next statement
that is sent, or by :meth:`TxConn.commit`, as its ``translate`` function says
(a message whose key is taken: :class:`~agentq.errors.DuplicateKey`, as
Spanner reports it from its commit). The server has then aborted the
transaction, so nothing of it commits. A statement without parameters is sent
on its own (simple protocol), so an application's multi-statement SQL keeps
working. Without a libpq that supports pipelines (before 14) every command is
sent on its own, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar, cast

import psycopg
from psycopg.pq import TransactionStatus

from agentq.errors import AgentQError, TransactionError

__all__ = [
    "BEGIN_READ_COMMITTED",
    "BEGIN_SERIALIZABLE",
    "Conn",
    "Translate",
    "TxConn",
    "run_or_defer",
]

BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE"
BEGIN_READ_COMMITTED = "BEGIN ISOLATION LEVEL READ COMMITTED"

Conn = psycopg.Connection[tuple[Any, ...]]
#: Turns the server's error for a held-back write into the error to report, or
#: None if the error is not about that write.
Translate = Callable[[psycopg.Error], AgentQError | None]

_PIPELINES = psycopg.Pipeline.is_supported()
T = TypeVar("T")


class _Command(NamedTuple):
    query: str
    params: Sequence[Any] | None
    translate: Translate | None = None


class TxConn:
    """The connection (in autocommit mode) of one explicit transaction: the
    ``execute`` and ``cursor`` of a psycopg connection, and the transaction's end."""

    def __init__(self, conn: Conn, begin: str) -> None:
        self.raw = conn
        self._pending: list[_Command] = [_Command(begin, None)]
        self._before_commit: list[_Command] = []
        self._began = False  # BEGIN has gone to the server

    @property
    def sql(self) -> Conn:
        """This object where a psycopg connection is expected (it has the
        ``execute`` and ``cursor`` the backend's SQL uses)."""
        return cast(Conn, self)

    def execute(
        self, query: Any, params: Sequence[Any] | Any | None = None, **kw: Any
    ) -> psycopg.Cursor[tuple[Any, ...]]:
        """Execute ``query`` in the transaction, after what is held back."""
        if self._pending and params is not None and _PIPELINES:
            pending, self._pending = self._pending, []
            with _reported(pending):
                cur = _pipelined(self.raw, pending, lambda: self.raw.execute(query, params, **kw))
            self._began = True
            return cur
        self._flush()
        return self.raw.execute(query, params, **kw)

    def cursor(self) -> psycopg.Cursor[tuple[Any, ...]]:
        """A cursor of the transaction (what is held back sent first)."""
        self._flush()
        return self.raw.cursor()

    def defer(
        self, query: str, params: Sequence[Any] | None, translate: Translate | None = None
    ) -> None:
        """Send ``query`` with the next statement (its result is not read). If
        the server refuses it, ``translate`` may name the error to report."""
        self._pending.append(_Command(query, params, translate))

    def before_commit(self, query: str, params: Sequence[Any] | None = None) -> None:
        """Run ``query`` just before ``COMMIT``, in the same round trip (its
        result is not read; an error fails the commit)."""
        self._before_commit.append(_Command(query, params))

    def commit(self, *, durable: bool = True) -> None:
        """Commit (``durable=False``: without waiting for the WAL flush, this
        transaction only). Raises :class:`TransactionError` if an earlier
        statement failed and the caller went on: the server has rolled the
        whole transaction back, so reporting success would lose it."""
        if not self._began and len(self._pending) == 1 and not self._before_commit:
            self._pending = []
            return  # nothing but BEGIN: nothing was sent, nothing to commit
        if self._began and self.raw.info.transaction_status == TransactionStatus.INERROR:
            self.rollback()
            raise TransactionError(
                "a statement of this transaction failed and the function went on: "
                "PostgreSQL rolled the whole transaction back, nothing was committed "
                "(let the error propagate, or run the statement that may fail in a "
                "savepoint)"
            )
        tail = [*self._pending, *self._before_commit]
        if not durable:
            tail.append(_Command("SET LOCAL synchronous_commit = off", None))
        self._pending, self._before_commit = [], []
        with _reported(tail):
            if _PIPELINES:
                done = _pipelined(self.raw, tail, lambda: self.raw.execute("COMMIT"))
            else:
                _send(self.raw, tail)
                done = self.raw.execute("COMMIT")
        if done.statusmessage != "COMMIT":  # "ROLLBACK": the server did not commit
            raise TransactionError(f"PostgreSQL answered {done.statusmessage!r} to COMMIT")

    def rollback(self) -> None:
        """Roll back whatever was sent (nothing to do if nothing was)."""
        self._pending, self._before_commit = [], []
        if self.raw.closed or self.raw.broken:
            return
        if self.raw.info.transaction_status != TransactionStatus.IDLE:
            self.raw.execute("ROLLBACK")

    def _flush(self) -> None:
        """Send what is held back now (one round trip)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        with _reported(pending):
            if _PIPELINES and len(pending) > 1:
                _pipelined(self.raw, pending, lambda: None)
            else:
                _send(self.raw, pending)
        self._began = True


def run_or_defer(
    conn: object, query: str, params: Sequence[Any], translate: Translate | None = None
) -> None:
    """Hold a write whose result is not read back for the transaction's next
    round trip if ``conn`` is a :class:`TxConn`; run it now on any other
    connection (the application's own, for a decision in its transaction)."""
    if isinstance(conn, TxConn):
        conn.defer(query, params, translate)
        return
    try:
        cast(Conn, conn).execute(query, params)
    except psycopg.Error as exc:
        error = translate(exc) if translate is not None else None
        if error is None:
            raise
        raise error from exc


def _send(conn: Conn, commands: Sequence[_Command]) -> None:
    for command in commands:
        conn.execute(command.query, command.params)


def _pipelined(conn: Conn, commands: Sequence[_Command], then: Callable[[], T]) -> T:
    """``commands``, then ``then()``, in one pipeline (one round trip); the
    server's first error is raised after the pipeline is closed (raised inside
    it, psycopg would log the closing's own error as a warning)."""
    failed: psycopg.Error | None = None
    result: T | None = None
    try:
        with conn.pipeline():
            try:
                _send(conn, commands)
                result = then()
            except psycopg.Error as exc:
                failed = exc
    except psycopg.Error:
        if failed is None:
            raise
        # Closing an aborted pipeline raises PipelineAborted: the first error counts.
    if failed is not None:
        raise failed
    return cast(T, result)


@contextmanager
def _reported(commands: Sequence[_Command]) -> Iterator[None]:
    """Reraise the server's error as the one a held-back command's ``translate``
    names, if one does."""
    try:
        yield
    except psycopg.Error as exc:
        for command in commands:
            if command.translate is not None:
                error = command.translate(exc)
                if error is not None:
                    raise error from exc
        raise
