"""How waiting receivers wake: in process on a notification, across processes on
a change of the WAL file.

An agentq commit in this process wakes receivers (and readers waiting for a
record, :mod:`agentq.waiting`) through the notifiers of its database file
(:mod:`agentq.backends.notify`); a commit that sent messages wakes only the
receivers of the queues it sent to. Commits by other processes (or any other
program writing the file) are noticed by the :class:`Watcher`, which cannot tell
what changed: it wakes every waiting reader, but receivers only of the queues
where, read on its own connection, a message is ready or the earliest
visibility time moved (a worker serving four queues, one busy, ran at 0.74x one
serving only the busy queue when every commit woke all its receivers). It
watches with an inotify watch of the WAL file
on Linux (no CPU while idle), elsewhere an adaptive 1-10 ms check of it backed
by ``PRAGMA data_version`` (about 1-2 % of a core while receivers wait).
"""

from __future__ import annotations

import logging
import os
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from agentq.backends.notify import Notifier, notifier_for

try:  # Linux: block on file events instead of polling (see Watcher)
    from inotify_simple import INotify as _INotify
    from inotify_simple import flags as _inotify_flags

    _WATCH_FLAGS = _inotify_flags.MODIFY | _inotify_flags.DELETE_SELF | _inotify_flags.MOVE_SELF
    _LOST_FLAGS = _inotify_flags.DELETE_SELF | _inotify_flags.MOVE_SELF | _inotify_flags.IGNORED
except ImportError:  # pragma: no cover - other platforms poll
    _INotify = None
    _WATCH_FLAGS = _LOST_FLAGS = 0

__all__ = ["Notifier", "Watcher", "notifier_for"]

log = logging.getLogger("agentq.sqlite")

#: Of the queues receivers wait on (second argument), those a change of the file
#: may concern; asked on the watcher's own connection (first argument).
ChangedQueues = Callable[[sqlite3.Connection, set[str]], set[str]]

_SAFETY_POLL = 0.25  # seconds between checks of the WAL while an inotify watch is active
_SETTLE = 0.1  # longest wait, after a file event, for its commit to become visible


class Watcher:
    """Notices commits by other processes and wakes this process's waiting receivers.

    While any receiver waits, one thread per backend watches the ``-wal`` file,
    which every commit writes. On Linux it blocks on an inotify watch of that
    file (``inotify_simple``): no CPU while nothing happens, woken within
    microseconds of a commit by any process. It still checks the file every
    ``_SAFETY_POLL`` seconds, and if the watch is lost (the WAL deleted or
    replaced by a foreign tool, say) it polls until it can watch the new file.

    Where inotify is unavailable it polls: ``os.stat`` of the WAL (size,
    modification time) and every tenth time ``PRAGMA data_version``, which
    catches a WAL restart within one timestamp tick; fast right after a change,
    backing off to ``poll_interval`` while the file is quiet (about 1-2 % of a
    core). Either way it runs in real time whatever the clock (it watches a
    file, not application time), and not at all while nobody waits.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        notifiers: Sequence[Notifier],
        poll_interval: float,
        receivers: tuple[Notifier, ChangedQueues] | None = None,
    ) -> None:
        self._conn = conn
        self._wal = path + "-wal"
        self._notifiers = tuple(notifiers)
        self._receivers = receivers
        self._interval = poll_interval
        self._fast = min(0.001, poll_interval)
        self._cond = threading.Condition()
        self._waiters = 0
        self._last: tuple[int | None, int, int] | None = None
        self._polls = 0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._inotify: Any = None
        self._watching = False  # an inotify watch of the WAL is in place
        self._wake_r, self._wake_w = os.pipe()
        self.events = 0  # wake-ups by a file event (inotify), for tests and debugging

    @property
    def blocking(self) -> bool:
        """Whether the watch blocks on inotify rather than polling."""
        return self._watching

    def _state(self, ask_sqlite: bool) -> tuple[int | None, int, int]:
        try:
            st = os.stat(self._wal)
            file_state = (st.st_size, st.st_mtime_ns)
        except OSError:
            file_state = (-1, -1)
        version = None
        if ask_sqlite:
            try:
                version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.ProgrammingError:  # closed meanwhile
                version = None
        elif self._last is not None:
            version = self._last[0]
        return (version, *file_state)

    def enter(self) -> None:
        """A receiver starts waiting: watch the file (starting the thread once)."""
        with self._cond:
            if self._waiters == 0:
                self._last = self._state(True)  # baseline before the caller re-leases
            self._waiters += 1
            if self._thread is None:
                self._watch()
                self._thread = threading.Thread(
                    target=self._run, name="agentq-sqlite-watch", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def leave(self) -> None:
        """A receiver stops waiting; with none left the thread idles."""
        with self._cond:
            self._waiters -= 1

    def _watch(self) -> None:
        """Start (or restart) the inotify watch of the WAL file, if possible."""
        if _INotify is None:
            return
        if self._inotify is None:
            try:
                self._inotify = _INotify(nonblocking=True)
            except OSError as exc:  # inotify limits reached, say: poll instead
                log.info("no inotify (%s); polling %s", exc, self._wal)
                return
        try:
            self._inotify.add_watch(self._wal, _WATCH_FLAGS)
            self._watching = True
        except OSError:
            self._watching = False  # no WAL file just now: poll, and try again each time

    def _run(self) -> None:
        interval = self._fast
        while not self._closed.is_set():
            with self._cond:
                while self._waiters == 0 and not self._closed.is_set():
                    self._cond.wait()
                self._polls += 1
                # Every check asks SQLite while watching (a check every 0.25 s is cheap);
                # polling, every tenth (checks come every 1-10 ms then).
                state = self._state(self._watching or self._polls % 10 == 0)
                changed = state != self._last
                self._last = state
            if changed:
                self._notify()
                interval = self._fast
            else:
                interval = min(interval * 1.25, self._interval)
            if self._inotify is not None and not self._watching:
                self._watch()
            if self._watching:
                self._wait_for_event()
            else:
                self._closed.wait(interval)

    def _wait_for_event(self) -> None:
        ready, _, _ = select.select([self._inotify, self._wake_r], [], [], _SAFETY_POLL)
        if self._inotify in ready:
            events = self._inotify.read(timeout=0)
            self.events += 1
            if any(e.mask & _LOST_FLAGS for e in events):
                self._watch()  # the WAL was deleted or replaced: watch the new one
            # Readers now; receivers once the commit is visible (_settle), as their
            # check would read the old state.
            self._notify(receivers=False)
            self._settle()

    def _version(self) -> int | None:
        with self._cond:
            try:
                return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.ProgrammingError:  # closed meanwhile
                return None

    def _settle(self) -> None:
        """Wake the readers again once the commit that wrote the WAL is visible.

        The file event comes with the commit's write, but readers see the commit
        only after SQLite updates the WAL index (after the fsync, with
        durability=full): a reader woken by the event alone often reads the old
        state and then slept until a later poll (0.25-2.5 s; measured with the
        HTTP API's long-poll). ``PRAGMA data_version`` changes when another
        connection's commit becomes visible: watch it for up to ``_SETTLE``
        seconds, then wake the readers again either way. A further file event
        ends the watch at once (the main loop handles it), so a busy database's
        events are never held up behind it.
        """
        start = self._version()
        deadline = time.monotonic() + _SETTLE
        pause = 0.0002
        while not self._closed.is_set() and time.monotonic() < deadline:
            ready, _, _ = select.select([self._inotify, self._wake_r], [], [], pause)
            if ready or self._version() != start:
                break
            pause = min(pause * 2, 0.004)
        self._notify()

    def _notify(self, receivers: bool = True) -> None:
        for notifier in self._notifiers:
            notifier.notify()
        if self._receivers is None or not receivers:
            return
        notifier, changed_queues = self._receivers
        waited_on = notifier.topics()
        if not waited_on:
            notifier.notify(())  # subscribers without a queue still hear every change
            return
        try:
            with self._cond:
                changed: Collection[str] | None = changed_queues(self._conn, waited_on)
        except Exception:  # closed meanwhile, say: wake them all, they look themselves
            changed = None
        notifier.notify(changed)

    def close(self) -> None:
        """Stop the thread and close the watch and its connection."""
        self._closed.set()
        os.write(self._wake_w, b"x")
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(1.0)
        with self._cond:
            self._conn.close()
            if self._inotify is not None:
                self._inotify.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
