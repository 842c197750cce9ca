"""The SQLite connection and the write path: pragmas, BEGIN IMMEDIATE, group commit.

Settings, and why:

* WAL journal: readers never block the writer, and several processes can share
  the file.
* ``synchronous=FULL`` by default: a commit is on disk when ``transact``
  returns. ``durability="normal"`` trades the last commits before a power loss
  (never corruption) for speed. Lease bookkeeping (``durable=False``) is always
  committed at NORMAL: after a power loss it can only be lost, which means an
  earlier redelivery.
* ``auto_vacuum=INCREMENTAL`` for a new file, so the space of deleted rows can
  be given back in small steps (:mod:`.space`).
* Every write, including leasing, runs in ``BEGIN IMMEDIATE``: the write lock
  is taken up front, so two workers (threads or processes) can never lease the
  same message, and WAL never has to fail a reader-turned-writer with BUSY.
* agentq processes queue for the write lock on a file lock beside the database
  (:mod:`.writer_lock`), so busy workers alternate promptly instead of sleeping
  in SQLite's busy handler; ``busy_timeout`` still makes any other writer wait
  instead of failing, and a transaction that meets BUSY is retried as a whole
  (tenacity).
* One connection per backend object, guarded by a lock: the engine serialises
  writers anyway, and a single connection avoids in-process lock contention.
* Group commit: transactions that queue for that connection while one runs are
  run by its thread after it, in the same transaction, and committed with one
  fsync; a failing one is undone alone (the others run again, then savepoints:
  :mod:`agentq.backends.combining`). Many agents deciding at once therefore commit faster
  than the disk's single-commit rate; a lone caller is unaffected.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from agentq.backends import combining
from agentq.backends.sqlite.driver_errors import translate, translate_os_error
from agentq.backends.sqlite.files import create_file
from agentq.backends.sqlite.writer_lock import WriterLock
from agentq.clock import Clock
from agentq.errors import BackendUnavailable, TransactionAborted, TransactionError

__all__ = ["Database"]

T = TypeVar("T")

log = logging.getLogger("agentq.sqlite")

#: Page size of new database files (see :meth:`Database.connect`).
PAGE_SIZE = 8192

_MAX_GROUP = 64  # transactions per group commit: bounds how long the first one waits


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


class Database:
    """One SQLite connection shared by a backend's threads, and the only way to
    write through it (:meth:`write`) or read outside a transaction (:meth:`read`).

    ``path`` is an absolute file path or ``":memory:"``; a database file and the
    writer lock that do not exist yet are created with ``file_mode``.
    """

    def __init__(
        self, path: str, *, durability: str, busy_timeout: float, file_mode: int, clock: Clock
    ) -> None:
        self.path = path
        self.memory = path == ":memory:"
        self.durability = durability
        self.busy_timeout = busy_timeout
        self.closed = False
        self._clock = clock
        self._lock = threading.RLock()
        self._local = threading.local()
        # Group commit: the transactions queued for the connection (agentq.backends.combining).
        self._queue = combining.Queue()
        if not self.memory:
            # Created here, not by SQLite (always 0644 less the umask); its -wal and
            # -shm files take this file's mode.
            try:
                create_file(path, file_mode)
            except OSError as exc:
                raise translate_os_error(exc, path) from exc
        self._conn = self.connect()
        self._writer = None if self.memory else WriterLock(path, busy_timeout, file_mode)

    def connect(self) -> sqlite3.Connection:
        """A new connection to the database with agentq's settings."""
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # guarded by self._lock
                timeout=self.busy_timeout,
            )
            # A new (empty) file only: before WAL mode writes its first page, and
            # never as a write to an existing file (which may be read-only): .space.
            if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
                # Records live in a WITHOUT ROWID B-tree, which keeps at most about
                # a quarter page of a row in place: with 4 KiB pages a task record
                # with 1 KiB of arguments spilled into a 4 KiB overflow page of its
                # own (4.7 KB per task); 8 KiB pages keep records up to ~2 KB whole.
                # (Before auto_vacuum, which fixes the page size.)
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            if not self.memory:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise BackendUnavailable(f"{self.path}: cannot enable WAL (got {mode})")
            conn.execute(f"PRAGMA synchronous={self.durability.upper()}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            mapped = translate(exc, self.path) or BackendUnavailable(
                f"cannot open SQLite database {self.path!r}: {exc}"
            )
            raise mapped from exc
        return conn

    def setup(
        self, script: str, then: Callable[[sqlite3.Connection], None] | None = None
    ) -> None:
        """Run a DDL script (``CREATE ... IF NOT EXISTS``) on the connection, then
        ``then(conn)`` (a migration that needs a check first)."""
        with self._lock, self._mapped_errors():
            self._conn.executescript(script)
            if then is not None:
                then(self._conn)

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` under the connection lock. A commit group holds that
        lock from BEGIN to COMMIT, so a read never sees uncommitted work."""
        with self._lock, self._mapped_errors():
            self._check_open()
            return fn(self._conn)

    def _check_open(self) -> None:
        if self.closed:
            raise BackendUnavailable(f"the SQLite backend of {self.path!r} is closed")

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        """Driver errors leave as agentq errors (:mod:`.driver_errors`)."""
        try:
            yield
        except sqlite3.Error as exc:
            mapped = translate(exc, self.path)
            if mapped is None:
                raise
            raise mapped from exc

    def close(self) -> None:
        self.closed = True
        with self._lock:
            self._conn.close()
            if self._writer is not None:
                self._writer.close()

    # -- the write path ------------------------------------------------------

    def write(self, body: Callable[[sqlite3.Connection], T], durable: bool = True) -> T:
        """Run ``body`` inside BEGIN IMMEDIATE ... COMMIT, retrying on BUSY.

        The first attempt runs directly; only a BUSY error (another process held
        the lock past ``busy_timeout``) builds the tenacity retry loop, keeping
        the common path cheap. Driver errors leave as agentq errors.
        """
        # try/except, not the ``_mapped_errors`` context manager: this is every
        # transaction's path, and a generator-based context costs a few µs.
        try:
            return self._write(body, durable)
        except sqlite3.Error as exc:
            mapped = translate(exc, self.path)
            if mapped is None:
                raise
            raise mapped from exc

    def _write(self, body: Callable[[sqlite3.Connection], T], durable: bool) -> T:
        self._check_open()
        if getattr(self._local, "in_tx", False):
            raise TransactionError("transactions cannot be nested")
        try:
            return self._write_once(body, durable)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
        # Imported on the first BUSY only: it is a twentieth of a second of
        # every process start (every CLI call), and most never need it.
        from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

        retrying = Retrying(
            retry=retry_if_exception(_is_busy),
            wait=wait_random_exponential(multiplier=0.005, max=0.5),
            stop=stop_after_delay(self.busy_timeout),
            sleep=self._clock.sleep,
            reraise=True,
        )
        try:
            result: T = retrying(self._write_once, body, durable)
            return result
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise TransactionAborted(
                    f"database {self.path!r} stayed locked for {self.busy_timeout}s"
                ) from exc
            raise

    def _write_once(
        self, body: Callable[[sqlite3.Connection], T], durable: bool, retry: bool = True
    ) -> T:
        """Run ``body`` in a commit group and return once the group has committed.

        The caller either leads (nobody held the connection: it runs its own
        ``body`` and those of whoever queues meanwhile) or sleeps until the
        leader has run and committed its ``body`` (:mod:`agentq.backends.combining`). A lone
        caller pays two uncontended lock round trips.
        """
        me = combining.Member(body, durable)
        if not self._queue.arrive(me):
            me.wait()
        if not me.finished:  # we lead: we head the queue
            try:
                self._lead(me)
            finally:
                self._queue.hand_on()
        if me.error is not None:
            if me.retryable and retry:
                # Our body succeeded; the shared COMMIT failed (or another member's
                # error rolled everything back). Nothing of ours was written: run it
                # again on its own, as transact may re-run a function on an abort.
                return self._write_once(body, durable, retry=False)
            raise me.error
        result: T = me.result
        return result

    def _lead(self, me: combining.Member) -> None:
        """Run the group ``me`` heads in one transaction, then wake its members."""
        group = combining.Group(self._queue, me, _MAX_GROUP)
        try:
            with self._lock:
                self._local.in_tx = True
                try:
                    if self.closed:
                        closed = f"the SQLite backend of {self.path!r} is closed"
                        group.fail_all(BackendUnavailable(closed))
                    else:
                        group.run(self._conn, self._begin, self._end)
                finally:
                    self._local.in_tx = False
        finally:
            group.finish()
        if group.interrupted is not None:
            raise group.interrupted  # Ctrl-C met the leader inside another's function

    def _begin(self, durable: bool) -> bool:
        """BEGIN IMMEDIATE (after the cross-process writer lock); True if the
        transaction is relaxed to NORMAL (lease bookkeeping of a FULL database)."""
        relax = not durable and self.durability == "full"
        if relax:
            # Lease bookkeeping need not reach the disk before we go on: if a
            # power loss drops it, the message is simply redelivered sooner.
            # The next durable commit syncs these WAL frames too.
            self._conn.execute("PRAGMA synchronous=NORMAL")
        try:
            if self._writer is not None:
                self._writer.acquire()
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._end(relax)
            raise
        return relax

    def _end(self, relaxed: bool) -> None:
        if self._writer is not None:
            self._writer.release()
        if relaxed:
            self._conn.execute("PRAGMA synchronous=FULL")
