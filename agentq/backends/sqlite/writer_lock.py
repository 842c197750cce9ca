"""A cross-process writer lock beside a SQLite file.

SQLite lets one writer in at a time. A process that finds the write lock taken
sleeps in SQLite's busy handler on a fixed schedule (1, 2, 5, 10 ... ms) and
retries; meanwhile the holder, which commits again within a millisecond, usually
wins the lock back. Two busy worker processes then take turns badly: one runs,
the other sleeps, and the write lock sits idle between them.

agentq processes therefore queue for an advisory ``flock`` on ``<db>-agentq.lock``
before ``BEGIN IMMEDIATE``: the lock is re-tried within tens of microseconds of
its release, so writers alternate and both processes keep a core busy (measured
with two workers: about 10 % more tasks/s and an even CPU split instead of
30/55 %). Other programs writing the file are unaffected: they never take this
lock and SQLite's own locking still decides.

The wait is bounded. After ``timeout`` seconds the caller goes on without the
lock and SQLite's busy timeout takes over, so a stuck process can delay the
others but never hang them.
"""

from __future__ import annotations

import logging
import os
import threading

from agentq.backends.sqlite.files import DEFAULT_FILE_MODE, open_or_create

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: SQLite's own locking only
    fcntl = None  # type: ignore[assignment]

__all__ = ["WriterLock"]

log = logging.getLogger("agentq.sqlite")

_FIRST_PAUSE = 0.00002
# The longest pause between tries. A durable commit holds the lock for about half
# a millisecond; with pauses doubling up to 1 ms, a waiter woke a mean 0.2 ms (p90
# 0.55 ms) after the release, the lock idle meanwhile. Capped at 0.2 ms: 0.15 ms
# (p90 0.3 ms), and two busy workers ran 7 % more tasks/s (14 interleaved pairs);
# a waiter then tries up to 5,000 times a second, each try one flock call.
_MAX_PAUSE = 0.0002


class WriterLock:
    """An advisory exclusive ``flock`` on a file next to the database, created
    with ``mode`` (like the database's files) if it does not exist.

    Not re-entrant and not a thread lock: the backend's own lock serialises its
    threads; this one only orders processes.
    """

    def __init__(self, db_path: str, timeout: float, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = f"{db_path}-agentq.lock"
        self.timeout = timeout
        self._pause = threading.Event()  # never set: only its timed wait is used
        self._fd: int | None = None
        self._held = False
        if fcntl is None:
            return
        try:
            self._fd = open_or_create(self.path, mode)
        except OSError as exc:
            # A read-only directory, say: SQLite's own locking still orders writers.
            log.info("no writer lock %s (%s): SQLite busy handling only", self.path, exc)
            self._fd = None

    def acquire(self) -> bool:
        """Take the lock, waiting up to ``timeout``; returns whether it is held."""
        fd = self._fd
        if fd is None or fcntl is None:
            return False
        pause = _FIRST_PAUSE
        waited = 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._held = True
                return True
            except BlockingIOError:
                pass
            if waited >= self.timeout:
                return False
            # A timed wait instead of a blocking flock: a blocking flock cannot be
            # given up, and a wedged holder must not hang every other process.
            self._pause.wait(pause)
            waited += pause
            pause = min(pause * 2, _MAX_PAUSE)

    def release(self) -> None:
        if self._held and self._fd is not None and fcntl is not None:
            self._held = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._held = False
            os.close(fd)  # closing drops the flock too
