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

from agentq.backends.postgres.inline import Inlined, inlined
from agentq.errors import AgentQError, TransactionAborted, TransactionError

__all__ = [
    "BEGIN_READ_COMMITTED",
    "BEGIN_SERIALIZABLE",
    "Conn",
    "NeighbourFailed",
    "Rows",
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
_SAVEPOINT = "SAVEPOINT agentq_member"
_RELEASE = "RELEASE SAVEPOINT agentq_member"
T = TypeVar("T")


class NeighbourFailed(TransactionAborted):
    """A write another transaction of the same commit group held back failed in
    this one's round trip: this transaction did not run to its end, and runs
    again (:mod:`agentq.backends.postgres.grouping`)."""


class Rows:
    """The rows of a statement sent with the ``COMMIT`` (:meth:`TxConn.before_commit`),
    to be read once the commit is done."""

    def __init__(self) -> None:
        self._cursor: psycopg.Cursor[tuple[Any, ...]] | None = None
        self._rows: list[tuple[Any, ...]] | None = None  # read already (a text of statements)

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Its rows (none if the transaction never reached its COMMIT)."""
        if self._rows is not None:
            return self._rows
        return [] if self._cursor is None else self._cursor.fetchall()


class _Command(NamedTuple):
    query: str
    params: Sequence[Any] | None
    translate: Translate | None = None
    seq: int = -1  # the how-manieth held-back write of this connection
    rows: Rows | None = None  # where its cursor goes, when its rows are read


_COMMIT = _Command("COMMIT", None)


class TxConn:
    """The connection (in autocommit mode) of one explicit transaction: the
    ``execute`` and ``cursor`` of a psycopg connection, and the transaction's end."""

    def __init__(self, conn: Conn, begin: str) -> None:
        self.raw = conn
        self._begin = begin
        self._pending: list[_Command] = [_Command(begin, None)]
        self._before_commit: list[_Command] = []
        self._began = False  # BEGIN has gone to the server
        self._savepoint_at: int | None = None  # where in _pending a held-back SAVEPOINT is
        #: Writes held back so far on this connection (a transaction's mark).
        self.deferred = 0
        #: Which held-back write the server refused, by its number (this transaction).
        self._failed: int | None = None

    def restart(self) -> None:
        """Begin the next transaction on this connection (the last one ended)."""
        self._pending = [_Command(self._begin, None)]
        self._before_commit = []
        self._began = False
        self._savepoint_at = None
        self._failed = None

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
            pending, self._pending, self._savepoint_at = self._pending, [], None
            with _reported(pending, self._refused):
                cur = _pipelined(self.raw, pending, lambda: self.raw.execute(query, params, **kw))
            self._began = True
            return cur
        self._flush()
        return self.raw.execute(query, params, **kw)

    def execute_inlined(self, query: str, params: Sequence[Any]) -> psycopg.Cursor[tuple[Any, ...]]:
        """:meth:`execute` for agentq's own statements of plain values: with what
        is held back, as one text of statements (one message, parsed and
        answered once: :mod:`.inline`), as the ``COMMIT`` goes; where a value is
        not plain, as :meth:`execute`. (An application's statement keeps the
        server's binding: :meth:`execute`.)"""
        if not self._pending:
            return self.raw.execute(query, params)
        pending = self._pending
        inline = inlined(self.raw, [*((c.query, c.params) for c in pending), (query, params)])
        if inline is None:
            return self.execute(query, params)
        self._pending, self._savepoint_at = [], None
        with _reported(pending, self._refused):
            cur = _results(_run(self.raw, inline), pending, inline)
        self._began = True
        return cur

    def cursor(self) -> psycopg.Cursor[tuple[Any, ...]]:
        """A cursor of the transaction (what is held back sent first)."""
        self._flush()
        return self.raw.cursor()

    def defer(
        self, query: str, params: Sequence[Any] | None, translate: Translate | None = None
    ) -> None:
        """Send ``query`` with the next statement (its result is not read). If
        the server refuses it, ``translate`` may name the error to report."""
        self._pending.append(_Command(query, params, translate, self.deferred))
        self.deferred += 1

    def failed_before(self, mark: int) -> bool:
        """Whether a write held back before ``mark`` (an earlier value of
        :attr:`deferred`) is what the server refused."""
        return self._failed is not None and self._failed < mark

    def before_commit(
        self, query: str, params: Sequence[Any] | None = None, *, read: bool = True
    ) -> Rows:
        """Run ``query`` just before ``COMMIT``, in the same round trip (an error
        fails the commit); its rows can be read once the commit is done (unless
        ``read`` is False: nobody reads them, and they are not kept)."""
        rows = Rows()
        self._before_commit.append(_Command(query, params, rows=rows if read else None))
        return rows

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
        self._pending, self._before_commit, self._savepoint_at = [], [], None
        with _reported(tail, self._refused):
            inline = inlined(self.raw, [(c.query, c.params) for c in [*tail, _COMMIT]])
            if inline is not None:
                done = _results(_run(self.raw, inline), tail, inline)
            elif _PIPELINES:
                done = _pipelined(self.raw, tail, lambda: self.raw.execute("COMMIT"))
            else:
                _send(self.raw, tail)
                done = self.raw.execute("COMMIT")
        if done.statusmessage != "COMMIT":  # "ROLLBACK": the server did not commit
            raise TransactionError(f"PostgreSQL answered {done.statusmessage!r} to COMMIT")

    def rollback(self) -> None:
        """Roll back whatever was sent (nothing to do if nothing was)."""
        self._pending, self._before_commit, self._savepoint_at = [], [], None
        if self.raw.closed or self.raw.broken:
            return
        if self.raw.info.transaction_status != TransactionStatus.IDLE:
            self.raw.execute("ROLLBACK")

    # -- savepoints, for a commit group's members (agentq.backends.combining) ----

    def savepoint(self) -> None:
        """Mark where the next member starts (held back like a write)."""
        self._pending.append(_Command(_SAVEPOINT, None))
        self._savepoint_at = len(self._pending) - 1

    def release(self) -> None:
        """The member since :meth:`savepoint` succeeded."""
        if self._savepoint_at is not None:  # never sent: nothing to release
            del self._pending[self._savepoint_at]
        else:
            self._pending.append(_Command(_RELEASE, None))
        self._savepoint_at = None

    def rollback_to(self) -> None:
        """Undo the member since :meth:`savepoint`: its held-back writes are
        dropped, or what it sent is rolled back."""
        if self._savepoint_at is not None:
            del self._pending[self._savepoint_at :]
        else:
            self._pending = []  # all of it the member's: the savepoint went before
            self.raw.execute(f"ROLLBACK TO {_SAVEPOINT}")
            self.raw.execute(_RELEASE)
        self._savepoint_at = None

    def settle(self) -> None:
        """Send what is held back now, so that its failure is reported to the
        member that wrote it (see :mod:`agentq.backends.combining`)."""
        self._flush()

    def _refused(self, command: _Command) -> None:
        if self._failed is None:
            self._failed = command.seq

    def _flush(self) -> None:
        """Send what is held back now (one round trip)."""
        if not self._pending:
            return
        pending, self._pending, self._savepoint_at = self._pending, [], None
        with _reported(pending, self._refused):
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


def _run(conn: Conn, text: Inlined) -> psycopg.Cursor[tuple[Any, ...]]:
    """Send ``text``; if the server refuses it, what it prepared is forgotten."""
    try:
        return conn.execute(text)
    except BaseException:
        text.failed()
        raise


def _results(
    cur: psycopg.Cursor[tuple[Any, ...]], commands: Sequence[_Command], text: Inlined
) -> psycopg.Cursor[tuple[Any, ...]]:
    r"""The rows of ``commands`` (the statements of ``text``, one result each, in
    order, its ``PREPARE``\ s' before the one at ``text.prepared_at``) handed
    to their :class:`Rows`; the cursor moved to the result after theirs."""
    for at, command in enumerate(commands):
        if at == text.prepared_at:
            for _ in range(text.prepares):
                cur.nextset()
        if command.rows is not None:
            command.rows._rows = cur.fetchall() if cur.description else []
        if not cur.nextset():
            break  # never short of one result a statement, unless the server says so
    else:
        if text.prepared_at >= len(commands):  # before the statement after theirs
            for _ in range(text.prepares):
                cur.nextset()
    return cur


def _send(conn: Conn, commands: Sequence[_Command]) -> None:
    for command in commands:
        cur = conn.execute(command.query, command.params)
        if command.rows is not None:
            command.rows._cursor = cur


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
def _reported(commands: Sequence[_Command], refused: Callable[[_Command], None]) -> Iterator[None]:
    """Reraise the server's error as the one a held-back command's ``translate``
    names, if one does (and tell ``refused`` which command that was)."""
    try:
        yield
    except psycopg.Error as exc:
        for command in commands:
            if command.translate is not None:
                error = command.translate(exc)
                if error is not None:
                    refused(command)
                    raise error from exc
        raise
