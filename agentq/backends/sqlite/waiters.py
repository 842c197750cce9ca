"""What another process's commit means to this process's waiters, and the reads
on the watcher's own connection that tell.

The :class:`~agentq.backends.sqlite.watcher.Watcher` notices that the file
changed; this module decides whom that wakes:

* readers waiting for a record (:mod:`agentq.waiting`, :class:`ReaderChecks`):
  only those whose record the change changed, from one read of the waited-on
  records' versions per change (:mod:`agentq.backends.record_changes`), not one
  read per reader (500 parked long-polls were 500 reads a commit); and no read
  at all when no other connection committed since the last check;
* receivers (:func:`wake_receivers`): only those of the queues where a message
  is ready or the earliest visibility time moved (:class:`QueueChanges`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from agentq.backends.notify import Notifier, RecordTopic
from agentq.backends.record_changes import RecordChanges
from agentq.backends.sqlite import records
from agentq.backends.sqlite.queues import QueueSQL

__all__ = ["ChangedQueues", "QueueChanges", "ReaderChecks", "waited_queues", "wake_receivers"]

#: Of the queues receivers wait on (second argument), those a change of the file
#: may concern; asked on the watcher's own connection (first argument).
ChangedQueues = Callable[[sqlite3.Connection, set[str]], set[str]]


def waited_queues(receivers: Notifier) -> set[str]:
    """The queues receivers wait on (their topics)."""
    return {t for t in receivers.topics() if isinstance(t, str)}


def wake_receivers(
    receivers: tuple[Notifier, ChangedQueues], conn: sqlite3.Connection, lock: threading.Condition
) -> None:
    """Wake the receivers of the queues that a change may concern, read on
    ``conn`` (the watcher's, under ``lock``); all of them if that read fails."""
    notifier, changed_queues = receivers
    waited_on = waited_queues(notifier)
    if not waited_on:
        notifier.notify(())  # subscribers without a queue still hear every change
        return
    try:
        with lock:
            changed: Collection[str] | None = changed_queues(conn, waited_on)
    except Exception:  # closed meanwhile, say: wake them all, they look themselves
        changed = None
    notifier.notify(changed)


class ReaderChecks:
    """The readers of ``readers`` waiting for a record, and the checks of their
    records that another connection's commits cause, read on ``conn`` (the
    watcher's, under ``lock``).

    ``others_version`` changes with every commit of a connection other than the
    backend's own; without it, ``version`` (``PRAGMA data_version`` of ``conn``)
    is read instead."""

    def __init__(
        self,
        readers: Notifier,
        conn: sqlite3.Connection,
        lock: threading.Condition,
        others_version: Callable[[], int] | None,
        version: Callable[[], int | None],
    ) -> None:
        self._records = RecordChanges(readers)
        self._conn = conn
        self._lock = lock
        self._others_version = others_version
        self._version = version
        # The value of others_version (or version) at the last check (see check).
        self._readers_version: int | None = None

    @property
    def checks(self) -> int:
        """Checks of the waited-on records made so far (a test's signal)."""
        return self._records.checks

    def seed(self, record: RecordTopic) -> None:
        """A reader has just subscribed to ``record``: look at it now, so another
        process's next commit wakes it only if that commit changed it."""
        self._records.seed(self._read_versions, record)

    def _read_versions(self, table: str, keys: Sequence[str]) -> dict[str, str]:
        with self._lock:
            return records.read_versions(self._conn, table, keys)

    def check(self) -> None:
        """Wake the readers whose record another connection's commit changed.

        Their records' versions are read only if another connection committed
        since the last check: ``PRAGMA data_version`` of the backend's own
        connection (``others_version``) changes with every commit but its own,
        whose readers it woke itself. So the server's own commits (each one a
        file event here) cost parked readers no query; a foreign commit costs
        one. Records not looked at yet are read either way (a new reader's
        first look). A check reads that version before the records, so a
        commit between the two is caught by the next check, which its own
        file event brings."""
        if not self._records.waited():
            self._records.notify_untopical()  # no record waited on: nothing to read
            return
        try:
            version = self._others_version() if self._others_version else self._version()
        except Exception:  # closed meanwhile: read them all
            version = None
        unchanged = version is not None and version == self._readers_version
        self._readers_version = version
        self._records.check(self._read_versions, only_new=unchanged)


class QueueChanges:
    """The :data:`ChangedQueues` of one backend: its queues by name (``specs``,
    the backend's own dict, which grows as queues are opened) and its clock
    (``now``, microseconds)."""

    def __init__(self, specs: Mapping[str, QueueSQL], now: Callable[[], int]) -> None:
        self._specs = specs
        self._now = now
        self._seen: dict[str, int | None] = {}  # the earliest time each last had
        self._sql: dict[tuple[str, ...], str] = {}  # see _earliest

    def __call__(self, conn: sqlite3.Connection, waited_on: set[str]) -> set[str]:
        """Of the queues receivers wait on, those another commit may have given a
        message to lease sooner: one is ready now, or the earliest visibility
        time changed since the watcher last looked (a send, a nack, an ack).
        The watcher asks this for changes of the file that no doorbell ring
        announced (every change, where there is no doorbell), so receivers of
        idle queues are not woken by every commit of a busy one."""
        now = self._now()
        known = sorted(q for q in waited_on if q in self._specs)
        # Not this backend's receivers (the notifier is per file): they look themselves.
        changed = set(waited_on).difference(known)
        if not known:
            return changed
        try:
            earliest_of = dict(zip(known, self._earliest(conn, known), strict=True))
        except Exception:  # a queue this backend cannot read: ask each on its own
            earliest_of = {}
            for queue in known:
                try:
                    earliest_of[queue] = conn.execute(self._specs[queue].next_visible).fetchone()[0]
                except Exception:  # unreadable: wake its receivers, they report it
                    changed.add(queue)
        seen = self._seen
        for queue, earliest in earliest_of.items():
            ready = earliest is not None and earliest <= now
            if ready or queue not in seen or seen[queue] != earliest:
                changed.add(queue)
            seen[queue] = earliest
        return changed

    def _earliest(self, conn: sqlite3.Connection, known: list[str]) -> tuple[Any, ...]:
        """The earliest visibility time of each queue, in one statement: one read
        transaction however many queues wait (without a doorbell the watcher
        asks after every change of a busy file)."""
        key = tuple(known)
        sql = self._sql.get(key)
        if sql is None:
            sql = "SELECT " + ", ".join(f"({self._specs[q].next_visible})" for q in known)
            if len(self._sql) > 64:  # the sets of waiting queues vary: stay bounded
                self._sql.clear()
            self._sql[key] = sql
        row: tuple[Any, ...] = conn.execute(sql).fetchone()
        return row
