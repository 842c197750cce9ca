"""Group commit for ``transact`` among the threads of one process, when they conflict.

Side by side in SERIALIZABLE transactions, decisions that each read a key and
write one next to the others' (idempotency keys ``call-1``, ``call-2``, ...) touch
the same index pages, which PostgreSQL's serializable snapshot isolation reports
as read/write conflicts: with eight threads calling ``enqueue_action``, one in
five transactions aborted and a caller ran out of retries
(``TransactionAborted``) within a few thousand calls. So a transaction runs on a
connection of its own first (side by side, the fastest way when nothing
conflicts: each round trip overlaps the others'), and after a serialization
failure or deadlock, and for :data:`CONTENDED_SECONDS` after its thread's last
one, through a commit group instead: transactions that start while another runs
wait in a queue, and the thread that runs (the leader) takes them into its own
transaction, one after another on its one pooled connection, and commits them
together (:mod:`agentq.backends.combining`, SQLite's group commit). The threads
that conflict then run one after the other, serially by construction, and share
one COMMIT.

Each member keeps its own outcome: one that raises rolls the transaction back,
and the members before it run again, each in a savepoint from then on; a
member's writes held back for the next round trip are sent before the next
member runs, so a key it finds taken is reported to it, not to its neighbour. A
serialization failure or deadlock with another process's transaction re-runs
the members, with backoff, as :meth:`Database.write` does, and for longer: a
transaction that keeps conflicting in the group runs again for
:data:`RETRY_SECONDS` after its first :data:`ATTEMPTS` runs (a streak of
conflicts among busy threads is not a reason to fail their caller).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from agentq.backends import combining
from agentq.backends.postgres.connection import (
    ATTEMPTS,
    Conn,
    Database,
    backoff,
    outcome_unknown,
)
from agentq.backends.postgres.driver_errors import RETRYABLE, mapped
from agentq.backends.postgres.pipeline import BEGIN_SERIALIZABLE, NeighbourFailed, TxConn
from agentq.errors import AgentQError, BackendUnavailable

__all__ = ["CONTENDED_SECONDS", "RETRY_SECONDS", "GroupCommit"]

T = TypeVar("T")

#: Most transactions one COMMIT carries.
_MAX_GROUP = 64
#: How long after a conflict transactions keep going through the group (seconds).
CONTENDED_SECONDS = 1.0
#: How long a transaction that keeps meeting conflicts in the group is run
#: again (seconds, after at least ATTEMPTS runs): eight threads enqueueing with
#: neighbouring idempotency keys met a streak of eight conflicts within half a
#: second about once in 8,000 calls, and the caller got TransactionAborted.
RETRY_SECONDS = 5.0


class _Control(combining.Control):
    """A group's transaction on a :class:`TxConn`."""

    def __init__(self, tx: TxConn, durable: bool, where: str) -> None:
        super().__init__(tx)
        self.tx = tx
        self.durable = durable
        self.where = where

    @property
    def in_transaction(self) -> bool:
        return not (self.tx.raw.closed or self.tx.raw.broken)

    def savepoint(self) -> None:
        self.tx.savepoint()

    def release(self) -> None:
        self.tx.release()

    def rollback_to(self) -> None:
        self.tx.rollback_to()

    def settle(self) -> None:
        self.tx.settle()

    def commit(self) -> None:
        self.tx.commit(durable=self.durable)

    def rollback(self) -> None:
        self.tx.rollback()

    def commit_outcome_unknown(self, exc: BaseException) -> BaseException | None:
        if isinstance(exc, psycopg.OperationalError) and self.tx.raw.closed:
            return outcome_unknown(exc, self.where, "a commit group")
        return None


class GroupCommit:
    """``transact``'s write path on one :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._queue = combining.Queue()
        self._local = threading.local()  # contended_until, per thread (time.monotonic())

    @property
    def contended(self) -> bool:
        """Whether a transaction of this thread met a conflict in the last
        :data:`CONTENDED_SECONDS`: until then its transactions go through the
        group, so the threads that conflict run one after the other. (Per
        thread: a worker's committer that meets another process's leaves its
        receiver and pruner side by side.)"""
        return time.monotonic() < getattr(self._local, "contended_until", 0.0)

    def conflicted(self) -> None:
        """A transaction of this thread met a serialization failure or a deadlock."""
        self._local.contended_until = time.monotonic() + CONTENDED_SECONDS

    def write(self, body: Callable[[TxConn], T], durable: bool) -> T:
        """Run ``body(tx)`` at SERIALIZABLE in a commit group; its result once
        the group committed."""
        doing = "running a transaction"
        # Real time: the conflicts are with real transactions (see connection.py).
        give_up = time.monotonic() + RETRY_SECONDS
        attempt = 0
        while True:
            attempt += 1
            me = combining.Member(body, durable)
            if not self._queue.arrive(me):
                me.wait()
            if not me.finished:  # we lead: we head the queue
                try:
                    self._lead(me, doing)
                finally:
                    self._queue.hand_on()
            error = me.error
            if error is None:
                result: T = me.result
                return result
            last = attempt >= ATTEMPTS and time.monotonic() >= give_up
            if (me.retryable or isinstance(error, NeighbourFailed)) and not last:
                continue  # the group's failure, not ours: nothing of ours was written
            if isinstance(error, RETRYABLE):
                self.conflicted()
            if isinstance(error, RETRYABLE) and not last:
                time.sleep(random.uniform(0, backoff(attempt)))  # noqa: TID251
                continue
            raise self._reported(error, doing)

    def _reported(self, error: BaseException, doing: str) -> BaseException:
        if isinstance(error, AgentQError) or not isinstance(
            error, psycopg.Error | psycopg_pool.PoolTimeout
        ):
            return error
        if isinstance(error, psycopg_pool.PoolTimeout):
            reported: BaseException = self._db.pool_exhausted(error)
        else:
            reported = mapped(error, self._db.config.where, doing)
        reported.__cause__ = error
        return reported

    def _lead(self, me: combining.Member, doing: str) -> None:
        group = combining.Group(self._queue, me, _MAX_GROUP)
        used: Conn | None = None
        try:
            if self._db.closed:
                group.fail_all(BackendUnavailable("backend is closed"))
                return
            try:
                with self._db.checkout(doing) as conn:
                    used = conn
                    tx = TxConn(conn, BEGIN_SERIALIZABLE)

                    def begin(durable: bool) -> bool:
                        tx.restart()
                        return durable

                    group.run(tx, begin, _ignore, _Control(tx, me.durable, self._db.config.where))
            except (psycopg.Error, psycopg_pool.PoolTimeout, AgentQError) as exc:
                if not group.members:  # no connection: nobody ran
                    group.fail_all(exc)
                # else: group.run settled every member it took (its own failure
                # marked them retryable), and finish() fails the rest
            if used is not None and used.closed:
                _lost_before_commit(group.members)
        finally:
            group.finish()
        if group.interrupted is not None:
            raise group.interrupted  # Ctrl-C met the leader inside another's function


def _lost_before_commit(members: list[combining.Member]) -> None:
    """The group's connection was lost: a member that failed with the driver's
    error failed before the COMMIT (one lost during it has
    :func:`~.connection.outcome_unknown`'s error), so the server rolled it back and
    it may run again."""
    for member in members:
        if isinstance(member.error, psycopg.OperationalError):
            member.retryable = True


def _ignore(_state: Any) -> None:
    """A group's transaction needs no closing beyond its COMMIT or ROLLBACK."""
