"""Which waited-on records another process's commit changed: the readers'
wake-up for commits this process did not make.

A commit made here names the records it wrote, and wakes only their readers
(:mod:`agentq.backends.notify`). A commit by another process is heard without
its content (a change of SQLite's WAL file, a PostgreSQL notification): rather
than wake every reader to read its own record again — a herd of N reads per
foreign commit, with N parked long-polls — :class:`RecordChanges` reads the
versions of the waited-on records in one query per table and wakes the readers
of those whose version moved since it last looked. A record it has not looked
at before counts as changed (its reader reads once more), so no change after a
reader's read is ever missed: the reader subscribed before it read, and the
version it read is at most the one seen here next.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from agentq.backends.notify import Notifier

__all__ = ["ReadVersions", "RecordChanges"]

log = logging.getLogger("agentq.backends")

#: Reads the versions (any text that changes with every write: the stored JSON
#: on every backend here) of ``keys`` of ``table``; keys without a record are
#: left out.
ReadVersions = Callable[[str, Sequence[str]], Mapping[str, str]]

_ABSENT = object()  # no record
_UNSEEN = object()  # not looked at yet


class RecordChanges:
    """The versions last seen of the records that readers of ``notifier`` wait on."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self._seen: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()
        #: Checks made (a test's signal: the check after a commit has run).
        self.checks = 0

    def waited(self) -> bool:
        """Whether any reader waits on a record now."""
        return any(isinstance(t, tuple) for t in self.notifier.topics())

    def notify_untopical(self) -> None:
        """Wake only the subscribers without a topic (they hear every change)."""
        self.notifier.notify(())

    def check(self, read_versions: ReadVersions, *, only_new: bool = False) -> None:
        """Wake the readers whose record changed since the last check, and every
        subscriber without a topic; if the versions cannot be read, everyone (they
        read for themselves). ``only_new``: nothing was committed since the last
        check (the caller knows), so only records not looked at yet are read."""
        with self._lock:
            waited: dict[str, list[str]] = {}
            for topic in self.notifier.topics():
                if isinstance(topic, tuple) and len(topic) == 2:
                    waited.setdefault(str(topic[0]), []).append(str(topic[1]))
            changed: set[tuple[str, str]] = set()
            seen: dict[tuple[str, str], object] = {}
            try:
                for table, keys in waited.items():
                    if only_new:
                        known = [k for k in keys if (table, k) in self._seen]
                        seen.update(((table, k), self._seen[(table, k)]) for k in known)
                        keys = [k for k in keys if (table, k) not in self._seen]
                        if not keys:
                            continue
                    versions = read_versions(table, keys)
                    for key in keys:
                        topic = (table, key)
                        version = versions.get(key, _ABSENT)
                        previous = self._seen.get(topic, _UNSEEN)
                        if previous is _UNSEEN or previous != version:
                            changed.add(topic)
                        seen[topic] = version
            except Exception as exc:  # closed meanwhile, say
                log.debug("could not read the waited-on records (%s): waking every reader", exc)
                self._seen.clear()
                self.checks += 1
                self.notifier.notify()
                return
            # Only what is waited on now is kept: a later reader of another record
            # starts afresh (its first check wakes it once).
            self._seen = seen
            self.checks += 1
        self.notifier.notify(changed)
