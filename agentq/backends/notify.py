"""In-process wake-ups: the subscribers of one database's commits.

A :class:`Notifier` holds anything with a ``set()`` method (a
``threading.Event``, or a small adapter that sets an ``asyncio.Event`` through
its loop) and sets subscribers when told that something was committed. A
subscriber may name a *topic*: a receiver its queue, a reader waiting for a
record the record (:func:`record_topic`). A notification naming topics (the
queues a commit sent to, the records it wrote) then sets only the subscribers
of those topics and the ones without a topic; a notification naming none (a
commit whose content is unknown) sets every subscriber.

Subscribers are indexed by topic, so a notification costs what it names, not
what waits: 500 readers parked on other tasks cost a commit nothing (issue 27:
every commit used to wake every parked long-poll and event stream, and 150 of
them made 300 enqueues take 8.0 s instead of 0.9 s).

Waiting code subscribes *before* it reads, clears its event, reads, and then
waits, so a commit between the read and the wait is never missed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection, Hashable
from typing import Protocol

__all__ = ["Notifier", "RecordTopic", "Wake", "notifier_for", "record_topic"]


class Wake(Protocol):
    """Something a notification sets: ``threading.Event`` or an adapter."""

    def set(self) -> None:
        """Wake the waiter (called from any thread; must not block)."""
        ...


#: The topic of one record: ``(table, key)``.
RecordTopic = tuple[str, str]


def record_topic(table: str, key: str) -> RecordTopic:
    """The topic a reader of record ``key`` of ``table`` subscribes to, and a
    commit that wrote it notifies."""
    return (table, key)


class Notifier:
    """Wakes the in-process subscribers of one database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._topic_of: dict[Wake, Hashable | None] = {}
        # Subscribers by topic; None holds those without one (set by every notification).
        self._by_topic: dict[Hashable | None, set[Wake]] = {}
        #: Subscriptions made so far: while it stays the same, the topics waited
        #: on are at most those of the last look (a subscriber may only have left).
        self.generation = 0

    def subscribe(self, wake: Wake, topic: Hashable | None = None) -> None:
        """Set ``wake`` on every notification, or (with a ``topic``) on those
        that name no topics or name ``topic``."""
        with self._lock:
            self._drop(wake)
            self._topic_of[wake] = topic
            self._by_topic.setdefault(topic, set()).add(wake)
            self.generation += 1

    def unsubscribe(self, wake: Wake) -> None:
        with self._lock:
            self._drop(wake)

    def _drop(self, wake: Wake) -> None:
        if wake not in self._topic_of:
            return
        topic = self._topic_of.pop(wake)
        wakes = self._by_topic[topic]
        wakes.discard(wake)
        if not wakes:
            del self._by_topic[topic]

    def topics(self) -> set[Hashable]:
        """The topics someone waits on now."""
        with self._lock:
            return {t for t in self._by_topic if t is not None}

    def has_topics(self) -> bool:
        """Whether anyone waits on a topic now (without copying the topics)."""
        with self._lock:
            return len(self._by_topic) > (None in self._by_topic)

    def notify(self, topics: Collection[Hashable] | None = None) -> None:
        """Set the subscribers: all of them, or with ``topics`` the subscribers
        of those topics and every subscriber without one."""
        if not self._topic_of:
            # Nobody subscribed (an enqueuing process, most commits): no lock. A
            # subscriber that joins meanwhile reads the state after joining, and
            # the change notified is committed already.
            return
        with self._lock:
            if topics is None:
                wakes = list(self._topic_of)
            else:
                wakes = list(self._by_topic.get(None, ()))
                by_topic = self._by_topic
                # Whichever is smaller: the topics named, or the topics waited on.
                if len(topics) <= len(by_topic):
                    for topic in topics:
                        found = by_topic.get(topic)
                        if found:
                            wakes.extend(found)
                else:
                    for topic, found in by_topic.items():
                        if topic is not None and topic in topics:
                            wakes.extend(found)
        for wake in wakes:
            wake.set()


_notifiers: weakref.WeakValueDictionary[tuple[str, str], Notifier] = (
    weakref.WeakValueDictionary()
)
_notifiers_lock = threading.Lock()


def notifier_for(database: str, kind: str = "sent") -> Notifier:
    """The one notifier of ``kind`` for a database in this process: ``"sent"``
    wakes receivers (a commit sent messages), ``"commits"`` wakes readers waiting
    for a record to change (a commit wrote it)."""
    with _notifiers_lock:
        notifier = _notifiers.get((database, kind))
        if notifier is None:
            notifier = Notifier()
            _notifiers[(database, kind)] = notifier
        return notifier
