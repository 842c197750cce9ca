"""Which waited-on records another process's commit changed: the readers'
wake-up for commits this process did not make.

A commit made here names the records it wrote, and wakes only their readers
(:mod:`agentq.backends.notify`). A commit by another process is heard without
its content (a change of SQLite's WAL file, a PostgreSQL notification): rather
than wake every reader to read its own record again — a herd of N reads per
foreign commit, with N parked long-polls — :class:`RecordChanges` reads the
versions of the waited-on records in one query per table and wakes the readers
of those whose version moved since it last looked. It first looks at a record
when its reader subscribes (:meth:`RecordChanges.seed`, before the reader's own
read); one it could not look at then counts as changed at the next check (its
reader reads once more). Either way no change after a reader's read is missed:
the version first seen here is at most the one the reader read.

While no foreign commit and no new reader came since the last check, a check
reads nothing and goes over no reader (SQLite's watcher checks after every
change of the file, the server's own commits included).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from agentq.backends.notify import Notifier, RecordTopic

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
        # The notifier's generation at the last read of the versions: while it
        # stays, no reader is new (see check's ``only_new``).
        self._generation: int | None = None
        #: Checks made (a test's signal: the check after a commit has run).
        self.checks = 0

    def waited(self) -> bool:
        """Whether any reader waits on a record now (the readers' notifier has
        no other topics)."""
        return self.notifier.has_topics()

    def notify_untopical(self) -> None:
        """Wake only the subscribers without a topic (they hear every change)."""
        self.notifier.notify(())

    def seed(self, read_versions: ReadVersions, topic: RecordTopic) -> None:
        """Look at ``topic`` now, for a reader that has just subscribed to it and
        is about to read it: its first check then compares with this version
        instead of waking it (500 long-polls parked at once used to be 500
        wake-ups and reads at the next foreign commit).

        Called after the subscription and before the reader's read, so this
        version is at most the one the reader sees: a later change by another
        process moves it away from this one, and one made here wakes the
        reader directly. A version seen already is kept (older, so no change
        after it is hidden from the readers waiting since then)."""
        table, key = topic
        try:
            version = read_versions(table, [key]).get(key, _ABSENT)
        except Exception as exc:  # closed meanwhile: the first check wakes it instead
            log.debug("could not read %s for its new reader (%s)", topic, exc)
            return
        with self._lock:
            self._seen.setdefault(topic, version)

    def check(self, read_versions: ReadVersions, *, only_new: bool = False) -> None:
        """Wake the readers whose record changed since the last check, and every
        subscriber without a topic; if the versions cannot be read, everyone (they
        read for themselves). ``only_new``: nothing was committed since the last
        check (the caller knows), so only records not looked at yet are read;
        with no reader subscribed since, nothing is (the server's own commits,
        each a change of the file, then cost parked readers nothing but this)."""
        with self._lock:
            generation = self.notifier.generation  # before the topics: a later one is new
            if only_new and generation == self._generation:
                self.checks += 1
                self.notifier.notify(())  # the subscribers without a topic hear every change
                return
            self._generation = generation
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
                self._generation = None
                self.checks += 1
                self.notifier.notify()
                return
            # Only what is waited on now is kept: a later reader of another record
            # starts afresh (its first check wakes it once).
            self._seen = seen
            self.checks += 1
        self.notifier.notify(changed)
