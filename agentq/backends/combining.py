"""Group commit by combining: transactions that queue for the connection are run
by one thread, the leader, in one BEGIN ... COMMIT.

The earlier design let each queued thread run its own transaction function in
turn, handing the connection from thread to thread. Measured on two cores, that
doubled the CPU per decision as soon as a second caller came along (111 → 228 µs
at ``synchronous=NORMAL``): every hand-off woke a thread, and every SQLite call
of the running transaction released the GIL to the threads just woken, whose
own Python then ran inside the critical section. Here the waiting threads sleep
until their transaction is committed; the leader runs the functions back to
back, commits once, wakes them, and hands the lead to the first thread still
queued. If a function raises, the transaction rolls back and the functions
before it run again; from then on the group gives each function a savepoint
(:meth:`Group.run`).

A function therefore may run on the leader's thread, not its caller's: it runs
in its caller's :mod:`contextvars` context (tracing spans, request ids), and
whatever it raises is raised in its caller. Thread-local state of its caller is
not visible to it; agentq keeps none there.

SQLite runs every transaction of a backend this way (it has one writer
connection); PostgreSQL runs ``transact`` this way among the threads of one
process, on one pooled connection. PostgreSQL holds writes back for the next
round trip, so one member's failed write can surface in the next member's
statement: :meth:`Control.settle` sends the last member's before the shared
COMMIT, and between members once a member has failed (the backend re-runs a
member that met its neighbour's failure).
"""

from __future__ import annotations

import contextvars
import copy
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from agentq.errors import TransactionAborted

__all__ = ["Control", "Group", "Member", "Queue"]


class Member:
    """One transaction function waiting for, or inside, a commit group."""

    __slots__ = (
        "_wake", "body", "context", "durable", "error", "finished", "result", "retryable",
        "settled",
    )  # fmt: skip

    def __init__(self, body: Callable[[Any], Any], durable: bool) -> None:
        self.body = body
        self.durable = durable
        # The caller's context, copied when it has to wait (a leader runs its own
        # function itself): its function sees the caller's context variables on
        # whichever thread runs it.
        self.context: contextvars.Context | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        #: The error is the group's, not this function's (a shared COMMIT that
        #: failed, a member that took the whole transaction down): nothing of it
        #: was written, and it may run again alone.
        self.retryable = False
        self.settled = False  # given a result or an error (not yet committed, maybe)
        self.finished = False  # its group is over: the outcome is final
        self._wake: threading.Lock | None = None  # made only for a member that waits

    def run(self, conn: Any) -> Any:
        if self.context is None:
            return self.body(conn)
        return self.context.run(self.body, conn)

    def succeed(self, result: Any) -> None:
        self.result, self.error, self.retryable = result, None, False
        self.settled = True

    def fail(self, error: BaseException, *, retryable: bool = False) -> None:
        self.result, self.error, self.retryable = None, error, retryable
        self.settled = True

    def wait(self) -> None:
        """Sleep until finished or handed the lead."""
        assert self._wake is not None
        self._wake.acquire()

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.release()


class Queue:
    """Members waiting for the connection, and whether one of them leads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: deque[Member] = deque()
        self._leading = False

    def arrive(self, member: Member) -> bool:
        """Queue ``member``; True if it leads now (nobody else was), False if it must
        :meth:`Member.wait` to be finished or handed the lead."""
        with self._lock:
            self._pending.append(member)
            if not self._leading:
                self._leading = True
                return True
            member.context = contextvars.copy_context()  # in the caller's thread
            wake = threading.Lock()
            wake.acquire()
            member._wake = wake
            return False

    def take(self, durable: bool, limit: int) -> list[Member]:
        """Up to ``limit`` members from the front, all of durability ``durable``
        (a commit at NORMAL cannot carry a durable transaction, and bookkeeping
        should not wait for an fsync it does not need)."""
        taken: list[Member] = []
        if not self._pending:
            # Nobody queued (a lone caller's every transaction): no lock. One that
            # queues just after is handed the lead by hand_on, which looks locked.
            return taken
        with self._lock:
            pending = self._pending
            while pending and len(taken) < limit and pending[0].durable == durable:
                taken.append(pending.popleft())
        return taken

    def hand_on(self) -> None:
        """The leader is done: the first member still queued leads next."""
        with self._lock:
            if self._pending:
                self._pending[0].wake()
            else:
                self._leading = False

    def withdraw(self, member: Member) -> None:
        """Take back a leader that stopped before taking its group."""
        with self._lock:
            if member in self._pending:
                self._pending.remove(member)

    def waiting(self) -> int:
        """How many members are queued, not yet taken into a group."""
        with self._lock:
            return len(self._pending)


def _copy(exc: BaseException) -> BaseException:
    """A copy of ``exc`` for another thread to raise (each raise adds to its
    traceback), its attributes kept (the driver's ``sqlite_errorcode``, which
    :mod:`.driver_errors` maps); ``exc`` itself if it cannot be copied."""
    try:
        return copy.copy(exc)
    except Exception:
        return exc


class Control:
    """How a group ends its members and its transaction: by SQL statements on the
    connection (SQLite's). A backend that holds statements back overrides it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @property
    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    def savepoint(self) -> None:
        self.conn.execute("SAVEPOINT agentq_member")

    def release(self) -> None:
        self.conn.execute("RELEASE agentq_member")

    def rollback_to(self) -> None:
        """Undo the member since :meth:`savepoint`, and release the savepoint."""
        self.conn.execute("ROLLBACK TO agentq_member")
        self.conn.execute("RELEASE agentq_member")

    def settle(self) -> None:
        """Finish the last member's statements, so that a failure is its own
        (nothing to do where every statement runs when it is executed)."""

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def commit_outcome_unknown(self, exc: BaseException) -> BaseException | None:
        """The error every member gets if ``exc`` from :meth:`commit` leaves it
        unknown whether the transaction committed (a server connection lost
        during it), or None: nothing was written (SQLite's COMMIT, always)."""
        return None

    def rollback(self) -> None:
        self.conn.execute("ROLLBACK")


class Group:
    """The members one leader runs in one transaction: those it takes from the
    queue at the start, and those that queue while it runs (up to ``limit``)."""

    def __init__(self, queue: Queue, leader: Member, limit: int) -> None:
        self._queue = queue
        self._leader = leader
        self._limit = limit
        self.members: list[Member] = []
        #: A KeyboardInterrupt that reached the leader's thread inside another
        #: member's function: that member fails with it, and the leader raises it.
        self.interrupted: BaseException | None = None

    def fail_all(self, exc: BaseException) -> None:
        self.members = self._queue.take(self._leader.durable, self._limit)
        for member in self.members:
            member.fail(_copy(exc) if member is not self._leader else exc)

    def run(
        self,
        conn: Any,
        begin: Callable[[bool], bool],
        end: Callable[[bool], None],
        control: Control | None = None,
    ) -> None:
        """Run every member's function on ``conn`` and commit them together.

        ``begin(durable)`` opens the transaction (returning what ``end`` needs
        to close it); ``end`` closes it after COMMIT or ROLLBACK; ``control``
        (default: SQL on ``conn``) commits, rolls back and makes savepoints. The
        functions run back to back with no savepoints between them (two
        statements per member, measured at an eighth of a decision's cost with
        eight callers). When one raises, the whole transaction rolls back, the
        ones before it run again (a transaction function may be re-run: it must
        not have outside effects) and from then on each member runs in a
        savepoint, so a stream of failing functions cannot make the group run
        the others again and again.
        """
        ctl = control or Control(conn)
        durable = self._leader.durable
        written: list[Member] = []  # succeeded, in the open transaction
        state: bool | None = None  # begin's answer while a transaction is open
        careful = False  # a member failed: savepoints from now on
        todo = deque(self._queue.take(durable, self._limit))
        assert todo and todo[0] is self._leader, "the leader heads its group"
        self.members.extend(todo)

        def undo() -> None:
            # Roll back what is open, and run the members written so far again.
            nonlocal written, careful, state
            todo.extendleft(reversed(written))
            written, careful = [], True
            try:
                if ctl.in_transaction:
                    ctl.rollback()
            finally:
                opened, state = state, None
                if opened is not None:
                    end(opened)

        try:
            while todo:
                member = todo.popleft()
                if state is None:
                    try:
                        state = begin(durable)
                    except BaseException as exc:  # BUSY, say: each retries on its own
                        for rest in (member, *todo):
                            rest.fail(exc if rest is self._leader else _copy(exc))
                        return
                if careful and written and not self._settle(ctl, written):
                    todo.appendleft(member)  # the last one written failed: not this one
                    undo()
                    continue
                if not self._run_one(ctl, conn, member, written, careful):
                    # Its work (and maybe SQLite's whole transaction: disk full, I/O
                    # error) must go: roll back, and run the members before it again.
                    undo()
                if not todo:
                    room = self._limit - len(self.members)
                    joined = self._queue.take(durable, room) if room > 0 else []
                    self.members.extend(joined)
                    todo.extend(joined)
                # Before the shared COMMIT: the last member's own failure is its own.
                if (
                    not todo
                    and state is not None
                    and len(written) > 1
                    and not self._settle(ctl, written)
                ):
                    undo()
            if state is not None:
                self._commit(ctl, written)
                written = []
                opened, state = state, None
                end(opened)
        except BaseException as exc:
            # Our own statements failed, or Ctrl-C: nothing open is committed.
            self._abort(written, exc)
            if state is not None:
                try:
                    if ctl.in_transaction:
                        ctl.rollback()
                finally:
                    end(state)
            raise

    @staticmethod
    def _settle(ctl: Control, written: list[Member]) -> bool:
        """:meth:`Control.settle`; False (the last member written failed with its
        error, and the transaction must roll back) if that fails."""
        try:
            ctl.settle()
        except BaseException as exc:
            written.pop().fail(exc)
            return False
        return True

    def _run_one(
        self, ctl: Control, conn: Any, member: Member, written: list[Member], careful: bool
    ) -> bool:
        """Run one member's function; False if the transaction must roll back."""
        savepoint = careful and bool(written)
        if savepoint:
            ctl.savepoint()
        try:
            result = member.body(conn) if member is self._leader else member.run(conn)
        except BaseException as exc:
            member.fail(exc)
            if isinstance(exc, KeyboardInterrupt) and member is not self._leader:
                self.interrupted = exc
            if savepoint and ctl.in_transaction:
                ctl.rollback_to()
                return True
            return False
        if savepoint:
            ctl.release()
        member.succeed(result)
        written.append(member)
        return True

    def _commit(self, ctl: Control, written: list[Member]) -> None:
        """COMMIT. If it fails, nothing was written: the leader (or, if its own
        function had failed, the first member written) reports the error, and
        the others run again alone."""
        try:
            ctl.commit()
        except BaseException as exc:
            unknown = ctl.commit_outcome_unknown(exc)
            if unknown is not None:  # not to be run again: it may have committed
                for member in written:
                    member.fail(_copy(unknown))
                return
            reporter = self._leader if self._leader in written else written[0]
            reporter.fail(exc)
            self._abort([m for m in written if m is not reporter], exc, shared=True)
            if ctl.in_transaction:
                ctl.rollback()

    @staticmethod
    def _abort(written: list[Member], exc: BaseException | None, *, shared: bool = False) -> None:
        what = (
            "the commit shared with other transactions failed, nothing was written"
            if shared
            else "rolled back with another transaction of its commit group; retry it"
        )
        for member in written:
            member.fail(TransactionAborted(f"{what}: {exc}"), retryable=True)

    def finish(self) -> None:
        """Mark every member finished and wake all but the leader. A member the
        leader never got to (it was interrupted) fails: its outcome is unknown."""
        if self._leader not in self.members:
            self._queue.withdraw(self._leader)  # or the queue would wait on it forever
        for member in self.members:
            if not member.settled:
                member.fail(TransactionAborted(
                    "the leader of its commit group stopped before finishing it; "
                    "whether it was written is unknown"
                ))  # fmt: skip
            member.finished = True
            if member is not self._leader:
                member.wake()
