"""In-process wake-ups: the subscribers of one database's commits.

A :class:`Notifier` holds anything with a ``set()`` method (a
``threading.Event``, or a small adapter that sets an ``asyncio.Event`` through
its loop) and sets every subscriber when told that something was committed. A
subscriber may name a *topic* (a receiver: its queue); a notification naming
topics (the queues a commit sent to) then sets only the subscribers of those
topics and the ones without a topic.
Waiting code subscribes *before* it reads, clears its event, reads, and then
waits, so a commit between the read and the wait is never missed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection
from typing import Protocol

__all__ = ["Notifier", "Wake", "notifier_for"]


class Wake(Protocol):
    """Something a notification sets: ``threading.Event`` or an adapter."""

    def set(self) -> None:
        """Wake the waiter (called from any thread; must not block)."""
        ...


class Notifier:
    """Wakes the in-process subscribers of one database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakes: dict[Wake, str | None] = {}

    def subscribe(self, wake: Wake, topic: str | None = None) -> None:
        """Set ``wake`` on every notification, or (with a ``topic``) on those
        that name no topics or name ``topic``."""
        with self._lock:
            self._wakes[wake] = topic

    def unsubscribe(self, wake: Wake) -> None:
        with self._lock:
            self._wakes.pop(wake, None)

    def topics(self) -> set[str]:
        """The topics someone waits on now."""
        with self._lock:
            return {t for t in self._wakes.values() if t is not None}

    def notify(self, topics: Collection[str] | None = None) -> None:
        """Set the subscribers: all of them, or with ``topics`` the subscribers
        of those topics and every subscriber without one."""
        with self._lock:
            if topics is None:
                wakes = list(self._wakes)
            else:
                wakes = [w for w, t in self._wakes.items() if t is None or t in topics]
        for wake in wakes:
            wake.set()


_notifiers: weakref.WeakValueDictionary[tuple[str, str], Notifier] = (
    weakref.WeakValueDictionary()
)
_notifiers_lock = threading.Lock()


def notifier_for(database: str, kind: str = "sent") -> Notifier:
    """The one notifier of ``kind`` for a database in this process: ``"sent"``
    wakes receivers (a commit sent messages), ``"commits"`` wakes readers waiting
    for a record to change (any commit)."""
    with _notifiers_lock:
        notifier = _notifiers.get((database, kind))
        if notifier is None:
            notifier = Notifier()
            _notifiers[(database, kind)] = notifier
        return notifier
