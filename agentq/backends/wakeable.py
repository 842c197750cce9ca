"""A receive stream that a stopping worker can end at once.

SQLite's and PostgreSQL's :meth:`~agentq.backends.base.Backend.stream` wait on an
event between leases (woken by commits, or at the end of ``max_duration``). A
worker that stops while its receivers wait would otherwise sit out the rest of
that wait: up to ``receive_timeout`` real seconds, and on a
:class:`~agentq.clock.FakeClock` until fake time moves. :meth:`cancel` ends the
wait and the stream (a batch it already leased is still yielded first); the
worker cancels its receivers' streams when it stops, as it cancels Spanner's.
"""

from __future__ import annotations

import threading
from collections.abc import Generator

from agentq.backends.queue_values import Message

__all__ = ["WakeableStream"]


class WakeableStream:
    """An iterator of leased batches over ``batches``, which waits on ``wake``
    and ends once ``cancelled`` is set (check it after clearing ``wake``, just
    before waiting: :meth:`cancel` sets ``cancelled`` first, then ``wake``)."""

    def __init__(
        self,
        batches: Generator[list[Message], None, None],
        wake: threading.Event,
        cancelled: threading.Event,
    ) -> None:
        self._batches = batches
        self._wake = wake
        self._cancelled = cancelled

    def __iter__(self) -> WakeableStream:
        return self

    def __next__(self) -> list[Message]:
        return next(self._batches)

    def close(self) -> None:
        """End the stream (its subscriptions are released)."""
        self._batches.close()

    def cancel(self) -> None:
        """End the stream's wait and the stream (from any thread)."""
        self._cancelled.set()
        self._wake.set()
