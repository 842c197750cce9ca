"""The values the queue contract passes around: a leased :class:`Message`, a
:class:`Renewal`, a queue's :class:`QueueStats`, and the
:class:`RedeliveryPolicy` of an expired lease (:mod:`agentq.backends.base`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agentq.errors import ConfigError
from agentq.spec import Key

__all__ = [
    "LEASE_SECONDS",
    "LEASE_SECONDS_RANGE",
    "Message",
    "QueueStats",
    "RedeliveryPolicy",
    "Renewal",
    "lease_seconds_option",
]

#: Lease length on receive and on renew: Spanner's, fixed there; the default of
#: the SQLite and PostgreSQL backends, whose ``lease_seconds`` option changes it
#: (a backend's own length: :attr:`agentq.backends.base.Backend.lease_seconds`).
LEASE_SECONDS = 10.0
#: The lengths ``lease_seconds`` may take (seconds): under 1 s the renewals of a
#: running task would take most of a worker's time; over an hour, a crashed
#: worker's tasks would wait that long.
LEASE_SECONDS_RANGE = (1.0, 3600.0)


def lease_seconds_option(value: object) -> float:
    """The ``lease_seconds`` option of a SQL backend (a number, or a URL's text),
    checked: ConfigError in one line for anything but a number of seconds in
    :data:`LEASE_SECONDS_RANGE`."""
    low, high = LEASE_SECONDS_RANGE
    try:
        if isinstance(value, bool):
            raise TypeError
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = float("nan")
    if not low <= seconds <= high:  # also refuses nan and infinities
        raise ConfigError(
            f"lease_seconds must be a number of seconds from {low:g} to {high:g}, not {value!r}"
        )
    return seconds


@dataclass(frozen=True)
class Message:
    """One leased message, as RECEIVE returns it."""

    queue: str
    key: Key
    payload: Any
    deliver_time: datetime
    lease_token: str
    lease_expiry: datetime
    last_in_batch: bool


@dataclass(frozen=True)
class Renewal:
    """One row of RENEWLEASE: ``new_token`` is None when the message was already
    acknowledged but the old token had not expired yet."""

    old_token: str
    new_token: str | None
    lease_expiry: datetime


@dataclass(frozen=True)
class QueueStats:
    """A queue's depth and health, named after Spanner's queue metrics.

    ``None`` means the backend cannot tell from SQL (Spanner reports leases,
    expirations and TTL drops as Cloud Monitoring metrics).
    """

    queue: str
    depth: int
    ready: int
    scheduled: int
    leased: int | None
    backing_off: int | None
    oldest_unacked_age: float | None
    lease_expirations: int | None
    ttl_dropped: int | None

    def _repr_html_(self) -> str:
        from agentq.notebook.html import queue_stats_html

        return queue_stats_html([self])


@dataclass(frozen=True)
class BacklogGroup:
    """The tasks of one tool waiting in a task queue with their messages not yet
    leased by any worker (:meth:`~agentq.backends.Backend.undelivered_backlog`):
    how many, and the ``created_at`` (ISO text, as the records hold it) of the
    oldest. ``tool`` is None for a record that names none."""

    tool: str | None
    count: int
    oldest_created_at: str | None


@dataclass(frozen=True)
class RedeliveryPolicy:
    """When a message whose lease expired becomes ready again.

    During the first ``exponential_phase`` after its delivery time, the n-th
    expiry waits ``initial * multiplier ** (n - 1)`` seconds (capped at
    ``max_delay``); after that, every redelivery waits ``later_delay``. The
    defaults follow Spanner's documented behaviour: exponential backoff during a
    message's first hour, then hourly.
    """

    initial: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 600.0
    exponential_phase: timedelta = timedelta(hours=1)
    later_delay: float = 3600.0

    def delay(self, expirations: int, age: float) -> float:
        """Seconds between the ``expirations``-th lease expiry and redelivery."""
        if age >= self.exponential_phase.total_seconds():
            return self.later_delay
        exponent = min(max(expirations - 1, 0), 64)
        return float(min(self.initial * self.multiplier**exponent, self.max_delay))
