"""The leases this backend object handed out and that are not known to be over.

A short receive first reads which messages of the queue are due (see
:mod:`.due`). SQL cannot see leases: a message this process leased and is
still working on looks as due as one nobody holds, and a RECEIVE sent for it
would wait its whole quiet interval for nothing. So the backend remembers the
keys it received (with their lease expiry, moved on by renewals) until an ack
of theirs commits or the lease runs out, and the check leaves them out.
Another process's leases are not known here: for those the RECEIVE waits its
quiet interval and comes back empty.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any

__all__ = ["HeldLeases"]

Key = tuple[Any, ...]


class HeldLeases:
    """Keys received by this backend object, by queue, until acked or expired."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, Key], tuple[str, datetime]] = {}
        self._by_token: dict[str, tuple[str, Key]] = {}

    def received(self, queue: str, key: Key, token: str, expiry: datetime) -> None:
        """A message was handed to the caller under ``token`` until ``expiry``."""
        with self._lock:
            old = self._by_key.get((queue, key))
            if old is not None:
                self._by_token.pop(old[0], None)
            self._by_key[(queue, key)] = (token, expiry)
            self._by_token[token] = (queue, key)

    def renewed(self, old_token: str, new_token: str | None, expiry: datetime) -> None:
        """A renewal's row: the lease goes on under ``new_token`` (or is over)."""
        with self._lock:
            held = self._by_token.pop(old_token, None)
            if held is None:
                return
            if new_token is None:
                self._by_key.pop(held, None)
                return
            self._by_key[held] = (new_token, expiry)
            self._by_token[new_token] = held

    def acked(self, acks: Iterable[tuple[str, Key]]) -> None:
        """Acks of these ``(queue, key)`` committed."""
        with self._lock:
            for held in acks:
                entry = self._by_key.pop(held, None)
                if entry is not None:
                    self._by_token.pop(entry[0], None)

    def live(self, queue: str, now: datetime) -> set[Key]:
        """Keys of ``queue`` held here whose lease has not expired by ``now``
        (forgetting the expired ones)."""
        with self._lock:
            over = [held for held, (_, expiry) in self._by_key.items() if expiry <= now]
            for held in over:
                token, _ = self._by_key.pop(held)
                self._by_token.pop(token, None)
            return {key for (q, key) in self._by_key if q == queue}
