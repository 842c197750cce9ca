""":meth:`PostgresBackend.transact <agentq.backends.postgres.backend.PostgresBackend.transact>`:
how the application's function becomes a committed transaction.

The function runs on a connection of its own at SERIALIZABLE, side by side with
the others; after a conflict, and while they keep coming, in a commit group
(:mod:`.grouping`); a ``fenced`` one at READ COMMITTED, never in a group. A
guess that failed (:mod:`.checks`) runs the function again, reading instead. The
queues it sent to are notified with its ``COMMIT`` (:mod:`.wakeups`) and, once
it committed, this process's receivers and the readers of the records it wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import psycopg

from agentq.backends.base import Transaction
from agentq.backends.notify import Notifier
from agentq.backends.postgres.checks import SpeculationFailed
from agentq.backends.postgres.connection import Conn, Database, TxConn
from agentq.backends.postgres.driver_errors import RETRYABLE
from agentq.backends.postgres.grouping import GroupCommit
from agentq.backends.postgres.pipeline import NeighbourFailed
from agentq.backends.postgres.queues import QueueSQL
from agentq.backends.postgres.records import Records
from agentq.backends.postgres.schema import notify_params
from agentq.backends.postgres.transaction import PostgresTransaction
from agentq.backends.postgres.wakeups import payload
from agentq.errors import AgentQError, TransactionAborted

__all__ = ["Transactions"]

T = TypeVar("T")

#: Runs of a transaction function again after a guess of it failed (.checks).
_GUESSES = 2


class Transactions:
    """Runs the transaction functions of one backend: ``transact`` is :meth:`run`.

    ``channel`` is the wake-up channel (None: this role neither notifies nor
    listens), ``notify_sql`` the statement that notifies on it; ``notifier``
    wakes this process's receivers of the queues sent to, ``commits`` the
    readers of the records written."""

    def __init__(
        self,
        db: Database,
        group: GroupCommit,
        now: Callable[[], int],
        queue_sql: Callable[[str, Conn], QueueSQL],
        records: Records,
        channel: str | None,
        notify_sql: str,
        notifier: Notifier,
        commits: Notifier,
    ) -> None:
        self._db = db
        self._group = group
        self._now = now
        self._queue_sql = queue_sql
        self._records = records
        self._channel = channel
        self._notify_sql = notify_sql
        self._notifier = notifier
        self._commits = commits

    def run(
        self, fn: Callable[[Transaction], T], *, durable: bool = True, fenced: bool = False
    ) -> T:
        """:meth:`~agentq.backends.base.Backend.transact` on this backend."""
        sent: set[str] = set()
        written: set[tuple[str, str]] = set()

        def body(conn: TxConn) -> T:
            nonlocal sent, written
            tx = PostgresTransaction(conn.sql, self._now(), self._queue_sql, self._records)
            mark = conn.deferred  # what was held back before this function: its neighbours'
            try:
                result = fn(tx)
            except psycopg.Error:
                _neighbour_failed(conn, mark)
                # After a failed send the server refuses every later statement:
                # the failure that doomed the transaction is the one to report.
                if tx.doomed is not None:
                    raise tx.doomed from None
                raise
            except AgentQError:
                _neighbour_failed(conn, mark)
                raise
            _neighbour_failed(conn, mark)
            if tx.doomed is not None:
                raise tx.doomed
            if tx.sent and self._channel is not None:
                # Delivered to listeners only if this transaction commits; sent with
                # the COMMIT, in its round trip.
                notice = payload(tx.sent, own=True)
                conn.before_commit(self._notify_sql, notify_params(notice), read=False)
            sent, written = tx.sent, tx.written
            return result

        for guess in range(_GUESSES, -1, -1):
            try:
                if fenced:
                    # READ COMMITTED: its writes lock and re-check their rows, and a
                    # transaction there takes part in no serializable conflict (it
                    # aborts nobody's, the application's own included). Never in a
                    # commit group, whose transaction is SERIALIZABLE.
                    result = self._db.write(body, durable=durable)
                else:
                    result = self._write(body, durable)
                break
            except SpeculationFailed:
                # Nothing of it committed, and the guess that failed (.checks) is
                # not made again: the function runs again, reading instead.
                if not guess:
                    raise
        if sent:
            self._notifier.notify(sent)
        self._commits.notify(written)  # only the readers of these records
        return result

    def _write(self, body: Callable[[TxConn], T], durable: bool) -> T:
        """``body`` on a connection of its own, side by side with the others; after
        a conflict, and while they keep coming, in a commit group (.grouping)."""
        if not self._group.contended:
            try:
                return self._db.write(body, durable=durable, serializable=True, attempts=1)
            except TransactionAborted as exc:
                if not isinstance(exc.__cause__, RETRYABLE):
                    raise
                self._group.conflicted()

        def own(conn: TxConn) -> T:
            # Its held-back writes and checks sent before the next member runs:
            # one failing is reported to this transaction, never to a neighbour
            # whose statements happened to carry it (held back to the COMMIT, it
            # went to the group's last member).
            result = body(conn)
            conn.settle()
            return result

        return self._group.write(own, durable)


def _neighbour_failed(conn: TxConn, mark: int) -> None:
    """Raise :class:`NeighbourFailed` if a write of an earlier transaction of the
    commit group failed in this one's round trip (this one then runs again)."""
    if conn.failed_before(mark):
        raise NeighbourFailed(
            "a transaction that shares this one's commit failed; this one runs again"
        )
