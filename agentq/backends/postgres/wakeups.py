"""Wake-ups across processes: ``LISTEN/NOTIFY``, with a bounded poll behind it.

A transaction that sent messages calls ``pg_notify`` before it commits, naming
the queues; PostgreSQL delivers the notification only if that transaction
commits, and after its rows are visible. Each backend that has a waiting
receiver keeps one extra connection that ``LISTEN``\\ s on the schema's channel
(:class:`Listener`, a daemon thread) and sets the in-process subscribers of the
named queues. Any session of the database may listen or notify on a channel it
can name, so the channel's name carries a secret kept in agentq's schema
(:func:`channel`): another role hears nothing of agentq's queues and commit
times, and cannot wake its receivers. Whoever sends, notifications wake the
receivers at most once every :data:`WAKE_INTERVAL` (a burst is one wake-up,
naming every queue named since the last), and the waited-on records are checked
at most once every :data:`CHECK_INTERVAL`. A dropped listening connection is
reopened with backoff, and every receiver is woken once it is back
(notifications sent while it was away are lost). Receivers also re-read every
``poll_interval`` seconds whatever happens, so a lost notification (PgBouncer in
transaction mode, a listener reconnecting) delays a message by at most that
long. A dropped connection that the socket does not
report at once is found by a check every :data:`_CHECK_SECONDS` of quiet.

Readers waiting for a record (:mod:`agentq.waiting`) are woken by this process's
commits that wrote it (in process), and by another process's notification only
if their record changed: one read of the waited-on records' versions per burst
of notifications (:mod:`agentq.backends.record_changes`, on a thread of its
own, so receivers' wake-ups never wait for it), not one read per reader. A
notification carries its sender's process mark (an item ``~<mark>``, which no
queue name can be): this process's own need no check. A worker's lease that
swaps records in with its claim wakes their readers too, once committed
(:class:`NotifyingClaim`). Where ``LISTEN`` cannot work (behind a
transaction-pooling pooler, or for a role that may not read the secret)
:class:`PollOnly` takes the listener's place and everyone re-reads.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence

import psycopg

from agentq.backends.base import EncodedFields, EncodedRecord, LeaseClaim, Message, StoredRecord
from agentq.backends.notify import Notifier, RecordTopic
from agentq.backends.postgres.config import PostgresConfig
from agentq.backends.postgres.connection import Conn, connect
from agentq.backends.record_changes import ReadVersions, RecordChanges

__all__ = [
    "CHECK_INTERVAL", "LISTENER_NAME", "WAKE_INTERVAL", "Listener", "NotifyingClaim", "PollOnly",
    "WakeThrottle", "channel", "payload",
]  # fmt: skip

log = logging.getLogger("agentq.backends.postgres")

#: The listening connection's ``application_name``.
LISTENER_NAME = "agentq listener"
_STOP_SECONDS = 0.25  # how often the listener looks at its stop flag (bounds close)
_CHECK_SECONDS = 5.0  # how often a quiet listener checks that its connection is there
_RECONNECT_MAX = 5.0
_MAX_PAYLOAD = 7900  # PostgreSQL's limit is 8000 bytes
#: Shortest time between two wake-ups of the receivers that notifications cause:
#: a burst of them is one wake-up, and a flood costs at most one lease per queue
#: and interval. Short, because it is also the longest a message sent just after
#: a wake-up waits for the next one (the enqueue -> start latency of a steady
#: trickle of tasks; 50 ms here made its median 24 ms).
WAKE_INTERVAL = 0.005
#: Shortest time between two checks of the waited-on records (each one read of
#: their versions) that notifications cause: readers wait on whole requests, so
#: a longer interval costs them little and bounds a flood's reads.
CHECK_INTERVAL = 0.05


class WakeThrottle:
    """At most one wake-up per ``interval``: a notification after a quiet
    interval wakes the receivers at once; those within it are one wake-up at
    its end. ``now`` is a monotonic time, passed in (tests drive it)."""

    def __init__(self, interval: float = WAKE_INTERVAL) -> None:
        self.interval = interval
        self._woken = -interval  # when the receivers were last woken

    def wait(self, now: float) -> float:
        """Seconds until a pending wake-up may go (0: now)."""
        return max(0.0, self._woken + self.interval - now)

    def take(self, now: float) -> bool:
        """Whether a wake-up may go at ``now``; if so, it is counted as gone."""
        if now - self._woken < self.interval:
            return False
        self._woken = now
        return True


def channel(secret: str) -> str:
    """The notification channel of agentq's schema, named by the schema's secret
    (:func:`~agentq.backends.postgres.schema.wakeup_secret`): any session of the
    database may ``LISTEN`` or ``NOTIFY`` on any channel it can name, so the name
    is one only agentq's roles can read (at most 63 bytes)."""
    return f"agentq_{secret}"[:63]


def _new_mark() -> str:
    return "~" + os.urandom(8).hex()


#: This process's mark on its notifications (a forked child draws its own).
_mark = _new_mark()


def _after_fork() -> None:
    global _mark
    _mark = _new_mark()


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork
    os.register_at_fork(after_in_child=_after_fork)


def payload(queues: set[str], *, own: bool = False) -> str:
    """The queues a commit sent to; empty (every receiver) when too many to name.
    ``own``: the commit's readers were woken in process (it adds this process's
    mark, so that its listeners skip the check of what readers wait on)."""
    text = ",".join(sorted(queues))
    if own:
        text = f"{text},{_mark}" if text else _mark
    return text if len(text.encode()) <= _MAX_PAYLOAD else ""


def _parse(note: str) -> tuple[set[str], bool]:
    """The queues a notification names, and whether it came from this process."""
    items = [item for item in note.split(",") if item]
    return {q for q in items if not q.startswith("~")}, _mark in items


class Listener:
    """One LISTENing connection of a backend, started when first needed."""

    def __init__(
        self,
        config: PostgresConfig,
        channel: str,
        receivers: Notifier,
        commits: Notifier,
        read_versions: ReadVersions,
    ) -> None:
        self._config = config
        self._channel = channel
        self._receivers = receivers
        self._commits = commits
        self._records = RecordChanges(commits)
        self._read_versions = read_versions
        self._check = threading.Event()  # another process committed: check the readers
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._checker: threading.Thread | None = None
        #: Set once the first LISTEN is in place (a test's signal; receivers poll anyway).
        self.listening = threading.Event()
        #: Notifications handled, and those another process sent (tests' signals).
        self.heard = 0
        self.foreign = 0
        #: Wake-ups of the receivers the notifications caused (a test's signal).
        self.wakes = 0

    def start(self) -> None:
        """Start listening if not yet started (idempotent, cheap when running)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(
                target=self._run, name=f"agentq-listen {self._config.where}", daemon=True
            )
            self._thread.start()
            self._checker = threading.Thread(
                target=self._check_readers, name=f"agentq-readers {self._config.where}",
                daemon=True,
            )  # fmt: skip
            self._checker.start()

    def seed(self, record: RecordTopic) -> None:
        """A reader has just subscribed to ``record``: look at it now, so another
        process's next notification wakes it only if its commit changed it."""
        self._records.seed(self._read_versions, record)

    @property
    def reader_checks(self) -> int:
        """Checks of the waited-on records made so far (a test's signal)."""
        return self._records.checks

    def _check_readers(self) -> None:
        """Wake the readers whose record another process's commit changed; a
        burst of notifications is one check."""
        while not self._stop.is_set():
            if not self._check.wait(_STOP_SECONDS):
                continue
            self._check.clear()
            if not self._commits.topics():
                self._commits.notify(())  # only subscribers without a record: no read
            else:
                self._records.check(self._read_versions)
            self._stop.wait(CHECK_INTERVAL)  # what comes meanwhile: one check after

    def _run(self) -> None:
        delay = 0.1
        first = True
        while not self._stop.is_set():
            conn: Conn | None = None
            try:
                conn = connect(self._config, name=LISTENER_NAME)
                conn.execute(f'LISTEN "{self._channel}"')
                if not first:
                    # Back after a drop: what was sent meanwhile was not announced.
                    self._receivers.notify()
                    self._commits.notify()
                first = False
                self.listening.set()
                delay = 0.1
                self._listen(conn)
            except Exception as exc:  # any failure: reconnect, the poll covers the gap
                if self._stop.is_set():
                    break
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                log.warning(
                    "LISTEN connection to %s lost (%s); reconnecting", self._config.where, reason
                )
                self._stop.wait(delay)
                delay = min(delay * 2, _RECONNECT_MAX)
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except psycopg.Error:
                        pass

    def _listen(self, conn: Conn) -> None:
        checked = time.monotonic()
        throttle = WakeThrottle()
        due: set[str] | None = set()  # the queues to wake next (None: every receiver)
        pending = False
        while not self._stop.is_set():
            wait = min(_STOP_SECONDS, throttle.wait(time.monotonic()))
            # stop_after=1: back after the first packet of notifications (whole:
            # leaving the generator early would drop the rest of a packet).
            for note in conn.notifies(timeout=wait if pending else _STOP_SECONDS, stop_after=1):
                queues, own = _parse(note.payload)
                if due is not None:
                    due = due | queues if queues else None
                pending = True
                if not own:
                    self.foreign += 1
                    self._check.set()
                self.heard += 1
            now = time.monotonic()
            if pending and throttle.take(now):
                # At most one wake-up per interval, for all that came since the last.
                self._receivers.notify(due)
                self.wakes += 1
                due, pending = set(), False
            if now - checked >= _CHECK_SECONDS:
                # Quiet for a while: make sure the connection is still there (a
                # half-open socket raises here rather than waiting forever).
                conn.execute("SELECT 1")
                checked = now

    def close(self) -> None:
        """Stop the thread; returns within about :data:`_STOP_SECONDS` (a
        reconnection in progress may take up to its connect timeout: not waited for)."""
        self._stop.set()
        with self._lock:
            threads = [t for t in (self._thread, self._checker) if t is not None]
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(_STOP_SECONDS + 1.0)


class NotifyingClaim:
    """A :class:`LeaseClaim` whose swaps, once committed, wake the readers of
    those records (as a transaction's writes do)."""

    def __init__(self, claim: LeaseClaim, commits: Notifier) -> None:
        self._claim = claim
        self._commits = commits
        self.table = claim.table
        self._keys: list[str] = []

    def ready(self) -> None:
        self._claim.ready()

    def prepare(
        self, messages: Sequence[Message], records: Mapping[str, StoredRecord]
    ) -> Sequence[tuple[str, str, EncodedFields | EncodedRecord]]:
        items = self._claim.prepare(messages, records)
        self._keys = [key for key, _, _ in items]
        return items

    def settled(self, changed: Sequence[str]) -> None:
        self._claim.settled(changed)
        gone = set(changed)
        written = {(self.table, key) for key in self._keys if key not in gone}
        if written:
            self._commits.notify(written)


class PollOnly:
    """The listener's place when ``LISTEN`` cannot work (``pooler=transaction``):
    receivers and waiters re-read every ``poll_interval`` instead."""

    def start(self) -> None:
        pass

    def seed(self, record: RecordTopic) -> None:
        pass  # nobody checks records for waiters: they re-read

    def close(self) -> None:
        pass
