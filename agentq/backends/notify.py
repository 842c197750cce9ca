"""In-process wake-ups: the subscribers of one database's commits.

A :class:`Notifier` holds anything with a ``set()`` method (a
``threading.Event``, or a small adapter that sets an ``asyncio.Event`` through
its loop) and sets every subscriber when told that something was committed.
Waiting code subscribes *before* it reads, clears its event, reads, and then
waits, so a commit between the read and the wait is never missed.
"""

from __future__ import annotations

import threading
import weakref
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
        self._wakes: set[Wake] = set()

    def subscribe(self, wake: Wake) -> None:
        with self._lock:
            self._wakes.add(wake)

    def unsubscribe(self, wake: Wake) -> None:
        with self._lock:
            self._wakes.discard(wake)

    def notify(self) -> None:
        with self._lock:
            wakes = list(self._wakes)
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
