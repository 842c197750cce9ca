"""When a streamed row's lease began, counted pessimistically (issue 29, defect 1).

A long-lived RECEIVE leases rows as it sends them, not when the worker reads
them: while every handler is busy, rows wait in the stream's buffer (gRPC's
and the client's) with their 10 s leases running. Counting a lease from the
moment the row is read therefore overstates what is left; on the real clock a
row read 3 s after the first had 7 s left, and the renewal sent at "receipt +
7.5 s" found the lease gone, so the task was redelivered while it still ran.

:class:`StreamLeaseClock` gives each batch the earlier of two estimates of when
its leases were granted, on this machine's monotonic clock:

* from the stream: when the reader last *waited* for the stream (nothing was
  buffered), the batch that ended the wait arrived as it was sent, so it was
  granted at about its arrival (less :data:`TRANSIT`); a batch that was already
  buffered was granted no earlier than the one that ended the last wait, so it
  keeps that estimate. The first batch of a stream ends the wait that began
  when the RECEIVE was sent.
* from the server: the lease's own expiry (``SpannerLeaseExpirationTimestamp``)
  minus the lease's length (10 s), read against the local wall clock. A local clock behind the
  server's makes this one late, which is why it only ever moves the estimate
  earlier.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TypeVar

from agentq.backends import LEASE_SECONDS, Message
from agentq.clock import Clock

__all__ = ["TRANSIT", "WAITED", "StreamLeaseClock"]

#: Seconds a batch may travel from the server to the reader once sent: a
#: waiting reader's batch is taken to have been granted this long before it
#: arrived.
TRANSIT = 0.5
#: A read of the stream that took longer than this (real seconds) waited for
#: the network, so nothing was buffered; a buffered batch is handed over in
#: well under a millisecond.
WAITED = 0.05

T = TypeVar("T")


class StreamLeaseClock:
    """Grant-time estimates for the batches of one stream (one reader thread)."""

    def __init__(self, clock: Clock, lease_seconds: float = LEASE_SECONDS) -> None:
        self._clock = clock
        self._lease_seconds = lease_seconds
        self._anchor: float | None = None  # grant estimate of the last waited-for batch

    def read(self, batches: Iterator[T]) -> tuple[T, float]:
        """The next batch of ``batches`` and when the stream's side says its leases
        began at the earliest (``StopIteration`` at the end of the stream)."""
        started = self._clock.monotonic()
        real = time.monotonic()  # real time: did this read wait on the network?
        batch = next(batches)
        if self._anchor is None or time.monotonic() - real >= WAITED:
            # The stream's first answer, or one the reader waited for: granted at
            # about its arrival, and never before the read (or RECEIVE) began.
            self._anchor = max(started, self._clock.monotonic() - TRANSIT)
        return batch, self._anchor

    def granted_at(self, message: Message, stream_estimate: float) -> float:
        """The earlier of the stream's and the server's estimate of when
        ``message``'s lease began, on the local monotonic clock."""
        left = (message.lease_expiry - self._clock.now()).total_seconds()
        by_server = self._clock.monotonic() - (self._lease_seconds - left)
        return min(stream_estimate, by_server)
