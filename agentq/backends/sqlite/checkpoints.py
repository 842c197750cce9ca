"""Checkpointing the WAL off the write path.

A checkpoint copies the pages committed to the WAL back into the database file
and fsyncs it. Left to SQLite, it runs inside the COMMIT that finds the WAL past
``wal_autocheckpoint`` pages (1,000), so every few hundred decisions one of them
pays for copying a thousand pages while holding the write lock that every other
writer waits for: measured on a 2-core machine, that was about a third of a
decision's time.

So the backend's writer connection leaves checkpoints to a :class:`Checkpointer`:
a thread with a connection of its own, woken after every :data:`COMMITS_PER_CHECKPOINT`
commits of this process, that runs ``PRAGMA wal_checkpoint(PASSIVE)``. A
passive checkpoint takes no write lock: writers keep appending to the WAL while
it copies earlier frames, and the next writer after a complete one starts the
WAL from its beginning again. The writer connection keeps a much larger
``wal_autocheckpoint`` (:data:`BACKSTOP_PAGES`) in case the thread cannot keep
up, and goes back to SQLite's own checkpoints (:data:`SQLITE_DEFAULT_PAGES`) if
the thread gives up (its connection fails), so the WAL stays bounded either way.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

__all__ = ["BACKSTOP_PAGES", "COMMITS_PER_CHECKPOINT", "SQLITE_DEFAULT_PAGES", "Checkpointer"]

log = logging.getLogger("agentq.sqlite")

#: Commits of this process between two background checkpoints.
COMMITS_PER_CHECKPOINT = 32
#: The writer connection's own autocheckpoint, in pages: only reached if the
#: checkpointer falls far behind.
BACKSTOP_PAGES = 4000
#: SQLite's own ``wal_autocheckpoint``, restored if the thread gives up.
SQLITE_DEFAULT_PAGES = 1000
#: Shortest pause between two checkpoints, in seconds: a checkpoint's fsyncs
#: share the disk with the writers' commits.
_MIN_PAUSE = 0.02
#: The longest the thread sleeps without a wake-up before checking whether it
#: should stop (it is normally woken by a commit or by :meth:`Checkpointer.close`).
_IDLE_WAIT = 5.0


class Checkpointer:
    """Runs passive WAL checkpoints of the database at ``path`` in a thread of its
    own, started by the first :meth:`committed` call."""

    def __init__(self, path: str, *, synchronous: str, busy_timeout: float) -> None:
        self.path = path
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._commits = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._broken = False
        #: Checkpoints run so far (each copies what the WAL holds at its start).
        self.checkpoints = 0

    def committed(self) -> bool:
        """Count one commit (called with the backend's connection lock held);
        False once the checkpointer gave up: the writer should checkpoint again."""
        if self._broken:
            return False
        self._commits += 1
        if self._commits < COMMITS_PER_CHECKPOINT:
            return True
        self._commits = 0
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._loop, name="agentq-checkpointer", daemon=True
            )
            self._thread.start()
        self._wake.set()
        return True

    def close(self) -> None:
        """Stop the thread (it finishes a checkpoint in progress first)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(self._busy_timeout + 5.0)

    def _loop(self) -> None:
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False,
                timeout=self._busy_timeout,
            )  # fmt: skip
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
        except sqlite3.Error as exc:
            self._give_up(exc)
            return
        try:
            while not self._stop.is_set():
                if not self._wake.wait(_IDLE_WAIT):
                    continue
                self._wake.clear()
                if self._stop.is_set():
                    break
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:
                    self._give_up(exc)
                    return
                self.checkpoints += 1
                self._stop.wait(_MIN_PAUSE)
        finally:
            conn.close()

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def broken(self) -> bool:
        """Whether it gave up (its connection failed): commits checkpoint instead."""
        return self._broken

    def _give_up(self, exc: sqlite3.Error) -> None:
        log.info("background checkpoints of %s stopped (%s); commits checkpoint", self.path, exc)
        self._broken = True  # the writer goes back to checkpointing in its commits
