"""The stand-in's time and its documented queue parameters, its own, not agentq's.

The stand-in plays Spanner, so nothing here comes from agentq's modules: a
stand-in that took its lease length or backoff from the code under test would
agree with that code's mistakes (issue 29). Each parameter names its source in
the queue documents (``/work/shared/seeds/001``, "Using Spanner queues"), or
says that the documents are silent and what the stand-in chose.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["LEASE_SECONDS", "Backoff", "QueueClock", "RealClock", "is_real"]

#: seeds/001, "extend a message's lease": when processing takes longer than "the
#: first lease (10 seconds)", RENEWLEASE; "The lease will be extended by 10s (not
#: configurable)". A lease, first or renewed, is 10 s.
LEASE_SECONDS = 10.0


class QueueClock(Protocol):
    """What the stand-in reads of a clock: Spanner's time (a test may pass a fake)."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class RealClock:
    """The system clock, as Spanner's own."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


def is_real(clock: QueueClock) -> bool:
    """A clock that runs by itself (a test's fake clock is advanced by hand)."""
    return not callable(getattr(clock, "advance", None))


class Backoff:
    """When a message whose lease expired is delivered again.

    Documented (seeds/001, best practices, error handling): failed messages are
    retried with backoff during the first hour; older ones once an hour. Not
    documented, chosen here: the backoff starts at ``initial`` seconds and
    doubles per expiry up to ``max_delay``.
    """

    def __init__(
        self,
        initial: float = 1.0,
        multiplier: float = 2.0,
        max_delay: float = 600.0,
        first_phase: float = 3600.0,
        later: float = 3600.0,
    ) -> None:
        self.initial, self.multiplier, self.max_delay = initial, multiplier, max_delay
        self.first_phase, self.later = first_phase, later

    def delay(self, expirations: int, age: float) -> float:
        """Seconds from the ``expirations``-th lease expiry to the next delivery of a
        message ``age`` seconds past its delivery time."""
        if age >= self.first_phase:
            return self.later
        exponent = min(max(expirations - 1, 0), 64)
        return float(min(self.initial * self.multiplier**exponent, self.max_delay))
