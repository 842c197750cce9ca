"""How waiting receivers wake: in process on a notification, across processes on
a ring of the doorbell or a change of the WAL file.

An agentq commit in this process wakes receivers (and readers waiting for a
record, :mod:`agentq.waiting`) through the notifiers of its database file
(:mod:`agentq.backends.notify`); a commit that sent messages wakes only the
receivers of the queues it sent to. Other processes are heard by the
:class:`Watcher`:

* receivers, from the doorbell (:mod:`.doorbell`): a commit that sent messages
  rings its queues' slots once it is visible, and the watcher wakes the
  receivers of the slots that changed. Commits that send nothing (acks, leases,
  claims: most of a busy worker's) cost a waiting receiver nothing; they used to
  cost it a read of every waiting queue each, 150-250 µs of CPU per foreign
  commit, and a worker serving every queue ran at about 0.9x one serving only
  the busy queue;
* readers, from the WAL file, which every commit writes: they need every
  change, not only sends. A change wakes only the readers whose record it
  changed, from one read on the watcher's own connection (:mod:`.waiters`);
* what no ring announces (a program writing without agentq, a sender killed
  between its commit and its ring), from a check of the WAL every safety poll:
  receivers only of the queues where, read on the watcher's own connection, a
  message is ready or the earliest visibility time moved.

Without a doorbell (it could not be opened) every change of the WAL is checked
that way, at most once per 2 ms under a stream of commits. It watches with
inotify on Linux (no CPU while idle), elsewhere an adaptive 1-10 ms check of
the WAL backed by ``PRAGMA data_version`` (about 1-2 % of a core while
receivers wait).
"""

from __future__ import annotations

import logging
import os
import select
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from agentq.backends.notify import Notifier, RecordTopic, notifier_for
from agentq.backends.sqlite.doorbell import Doorbell
from agentq.backends.sqlite.waiters import (
    ChangedQueues,
    ReaderChecks,
    waited_queues,
    wake_receivers,
)

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

_SAFETY_POLL = 0.25  # seconds between checks of the WAL while an inotify watch is active
_BUSY_GAP = 0.002  # under a stream of WAL events, the shortest time between two checks
_SETTLE = 0.1  # longest wait, after a file event, for its commit to become visible


class Watcher:
    """Notices commits by other processes and wakes this process's waiting
    receivers and readers.

    While anyone waits, one thread per backend watches the files. On Linux it
    blocks on inotify watches (``inotify_simple``) of the doorbell, while
    receivers wait, and of the ``-wal`` file, while readers wait or there is no
    doorbell: no CPU while nothing happens, woken within microseconds of a
    commit by any process. It still checks the WAL every ``_SAFETY_POLL``
    seconds, and if the WAL's watch is lost (the WAL deleted or replaced by a
    foreign tool, say) it polls until it can watch the new file; if the
    doorbell's is, the WAL wakes receivers from then on.

    Where inotify is unavailable it polls: ``os.stat`` of the WAL (size,
    modification time) and every tenth time ``PRAGMA data_version``, which
    catches a WAL restart within one timestamp tick; fast right after a change,
    backing off to ``poll_interval`` while the file is quiet (about 1-2 % of a
    core). Either way it runs in real time whatever the clock (it watches
    files, not application time), and not at all while nobody waits.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        readers: Notifier,
        poll_interval: float,
        receivers: tuple[Notifier, ChangedQueues] | None = None,
        bell: Doorbell | None = None,
        others_version: Callable[[], int] | None = None,
    ) -> None:
        self._conn = conn
        self._wal = path + "-wal"
        self._receivers = receivers
        self._interval = poll_interval
        self._fast = min(0.001, poll_interval)
        self._cond = threading.Condition()
        # others_version changes when a connection other than the backend's own
        # commits: the readers' checks read nothing while only it commits.
        self._reader_checks = ReaderChecks(readers, conn, self._cond, others_version, self._version)
        self._waiters = 0
        self._readers = 0  # of the waiters, those that are not receivers
        self._last: tuple[int | None, int, int] | None = None
        self._polls = 0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._inotify: Any = None
        self._watching = False  # an inotify watch of the WAL is in place
        self._bell = bell
        self._bell_inotify: Any = None  # its own instance: selected whenever receivers wait
        self._bell_watching = False  # receivers are woken by the doorbell, not the WAL
        self._bell_seen = b""
        self._state_checked_at = 0.0  # monotonic time of the latest check of the WAL's state
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)  # a full pipe already wakes the thread
        self._checked_at = 0.0  # monotonic time of the latest check after a file event
        self.events = 0  # wake-ups by a file event (inotify), for tests and debugging
        self.rings = 0  # doorbell reads that woke a receiver's queue, likewise

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

    def enter(self, receiver: bool = False) -> None:
        """A receiver (or a reader waiting for a record) starts waiting: watch the
        files (starting the thread once)."""
        with self._cond:
            if self._waiters == 0:
                self._last = self._state(True)  # baseline before the caller re-leases
            self._waiters += 1
            if not receiver:
                self._readers += 1
            if self._thread is None:
                self._watch()
                self._watch_bell()
                self._thread = threading.Thread(
                    target=self._run, name="agentq-sqlite-watch", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
            first_receiver = receiver and self._waiters - self._readers == 1
        if self._bell_watching and (first_receiver or not receiver):
            self._poke()  # wait on the doorbell's, or the WAL's, events from now on, too

    def leave(self, receiver: bool = False) -> None:
        """A waiter stops waiting; with none left the thread idles."""
        with self._cond:
            self._waiters -= 1
            if not receiver:
                self._readers -= 1

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

    def _watch_bell(self) -> None:
        """Watch the doorbell, if there is one and inotify: receivers are then woken
        by other processes' rings instead of by every change of the WAL."""
        if self._bell is None or _INotify is None:
            return
        try:
            self._bell_inotify = _INotify(nonblocking=True)
            self._bell_inotify.add_watch(self._bell.path, _WATCH_FLAGS)
        except OSError as exc:
            log.info("not watching the doorbell (%s); the WAL wakes receivers", exc)
            return
        self._bell_seen = self._bell.read()
        self._bell_watching = True

    def _run(self) -> None:
        interval = self._fast
        checked = False  # the last wait ended with a file event, and its check
        while not self._closed.is_set():
            with self._cond:
                if self._waiters == 0:
                    checked = False
                while self._waiters == 0 and not self._closed.is_set():
                    self._cond.wait()
                self._polls += 1
                # Every check asks SQLite while watching (a check every 0.25 s is cheap);
                # polling, every tenth (checks come every 1-10 ms then). Right after a
                # file event's check there is nothing to compare: any later write of
                # the WAL brings an event of its own.
                changed = False
                now = time.monotonic()
                # With the doorbell, at most one check per safety poll: it only
                # catches what no ring announced (a program writing without agentq,
                # a sender killed between its commit and its ring).
                rung = self._bell_watching and self._watching  # both watches in place
                due = not rung or now - self._state_checked_at >= _SAFETY_POLL
                if not checked and due:
                    self._state_checked_at = now
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
                checked = self._wait_for_event()
            else:
                checked = False
                self._closed.wait(interval)

    def _wait_for_event(self) -> bool:
        """Wait for a file event or the safety poll's timeout. A ring of the
        doorbell wakes the receivers of its queues; a WAL event the readers, and
        (without a doorbell) the receivers once the commit is visible. True if a
        WAL event was handled."""
        rest = self._checked_at + _BUSY_GAP - time.monotonic()
        if rest > 0:
            # A busy file: the commits of this pause are checked together, once
            # (their events wait in the inotify queue; close() still ends the pause).
            select.select([self._wake_r], [], [], rest)
        fds = [self._wake_r]
        # Rings matter only while a receiver waits (a server that parks only
        # long-polls would wake at every enqueue's ring for nothing); unread,
        # they wait in the kernel (merged) for the next receiver.
        bell = self._bell_watching and self._waiters > self._readers
        if bell:
            fds.append(self._bell_inotify)
        # Nobody but readers needs the WAL's events once the doorbell wakes the
        # receivers: left out, they wait in the kernel (merged) for the next reader.
        wal = not self._bell_watching or self._readers > 0
        if wal:
            fds.append(self._inotify)
        ready, _, _ = select.select(fds, [], [], _SAFETY_POLL)
        if self._wake_r in ready:
            os.read(self._wake_r, 4096)
        if bell and self._bell_inotify in ready:
            self._rung()
        if not wal or self._inotify not in ready:
            return False
        events = self._inotify.read(timeout=0)
        self.events += 1
        if any(e.mask & _LOST_FLAGS for e in events):
            self._watch()  # the WAL was deleted or replaced: watch the new one
        # Readers now (their check reads nothing unless a commit is visible
        # already); receivers once the commit is visible (_settle), as their
        # check would read the old state.
        self._notify(receivers=False)
        self._settle()
        return True

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
        self._checked_at = time.monotonic()
        self._notify(receivers=not self._bell_watching)

    def _rung(self) -> None:
        """Wake the receivers of the queues whose doorbell slots changed."""
        events = self._bell_inotify.read(timeout=0)
        self.events += 1
        if any(e.mask & _LOST_FLAGS for e in events):
            # The doorbell was deleted or replaced: the WAL wakes receivers again.
            self._bell_watching = False
            log.info("the doorbell of %s went away; the WAL wakes receivers", self._wal)
        if self._receivers is None or self._bell is None:
            return
        notifier = self._receivers[0]
        after = self._bell.read()
        before, self._bell_seen = self._bell_seen, after
        changed = Doorbell.changed(before, after, waited_queues(notifier))
        self.rings += bool(changed)
        # Receivers without a queue hear every ring; with one, only their queue's.
        notifier.notify(changed)

    @property
    def reader_checks(self) -> int:
        """Checks of the waited-on records made so far (a test's signal)."""
        return self._reader_checks.checks

    def seed(self, record: RecordTopic) -> None:
        """A reader has just subscribed to ``record``: look at it now, so another
        process's next commit wakes it only if that commit changed it."""
        self._reader_checks.seed(record)

    def _notify(self, receivers: bool = True) -> None:
        self._reader_checks.check()
        if self._receivers is None or not receivers:
            return
        wake_receivers(self._receivers, self._conn, self._cond)

    def _poke(self) -> None:
        """Make the thread's current wait end (it re-reads what to wait on)."""
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # full: the thread has a wake-up pending anyway

    def close(self) -> None:
        """Stop the thread and close the watch and its connection."""
        self._closed.set()
        self._poke()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            _join_started(self._thread, 1.0)
        with self._cond:
            self._conn.close()
            if self._inotify is not None:
                self._inotify.close()
            if self._bell_inotify is not None:
                self._bell_inotify.close()
            os.close(self._wake_r)
            os.close(self._wake_w)



def _join_started(thread: threading.Thread, timeout: float) -> None:
    """Join ``thread`` for up to ``timeout`` seconds; a thread whose start Ctrl-C
    interrupted before it was marked started cannot be joined (``join`` raises)
    and is left to see the closed flag: it is a daemon."""
    try:
        thread.join(timeout)
    except RuntimeError:
        pass
