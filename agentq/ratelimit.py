"""Tool rate limits, shared by every worker process on one database.

A policy's ``rate_limit_per_second`` (and ``rate_limit_burst``) is a limit on the
*tool*, not on one worker: N workers on a database together make at most the
policy's calls. So the limiter's state lives in the database, in one runtime
record per tool (table ``rate_limits``), written through the backend contract
(``tx.get_record`` / ``tx.put_record`` in ``backend.transact``): it works the
same on SQLite and on Spanner.

The algorithm is GCRA (the "generic cell rate algorithm", a token bucket kept as
one number): the record holds the tool's *theoretical arrival time* ``tat``.
With ``interval = 1 / rate`` and ``tau = (burst - 1) * interval``, a call may
start at ``max(tat, now) - tau``, and taking it moves ``tat`` on by one
interval. One number per tool means a reservation is one short read-modify-write
transaction and two workers can never hand out the same turn.

Why one transaction per batch of turns, and why turns are reserved ahead:

* A worker reserves as many turns in one transaction as it has handler threads
  waiting for this tool at that moment (a *lease on a budget* sized by demand),
  so at high rates transactions stay few (one per batch of concurrent callers,
  not one per call) while no turn is taken that no task is waiting for: a fixed
  budget would waste the other workers' share whenever demand is low. Spare
  turns of a batch are usable only briefly (``_STALE_AFTER``) so a worker cannot
  sit on old turns and spend them later as an extra burst.
* A turn may lie in the future. A task whose turn is at most ``max_wait`` ahead
  waits for it in its handler thread; a later turn raises :class:`RateLimitWait`
  and the executor reschedules the task for its turn (ack + send at that time,
  status ``queued``, not a failure), recording the reserved turn in the task's
  ledger record for the next attempt. Tasks of a slow tool thus get turns one
  interval apart instead of all waking at the same instant and racing again, and
  none sits ``running`` in a handler slot. Turns are reserved at most an hour
  ahead (or two intervals for slower rates): beyond that a task is rescheduled,
  without a reservation, to when its turn comes into that window, which keeps
  ``tat`` (and every retry time it gives) within reach of a datetime.

The reservation transaction is not forced to disk (``durable=False``): losing the
last turns on power failure only allows one extra burst.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentq.backends.base import Backend, Transaction
from agentq.clock import Clock, from_micros, to_micros
from agentq.errors import AgentQError
from agentq.policies import Policy

__all__ = [
    "MAX_WAIT",
    "RATE_LIMITS",
    "RESERVE_AHEAD",
    "RateLimitWait",
    "RateLimiter",
    "gcra",
    "reserved_turn",
]

#: Record table holding each limited tool's theoretical arrival time.
RATE_LIMITS = "rate_limits"
#: Seconds a handler thread may wait in place for its turn.
MAX_WAIT = 1.0
#: Seconds ahead turns are reserved (at least two intervals for slower rates).
RESERVE_AHEAD = 3600.0
#: Seconds a spare turn of a batch stays usable after its time.
_STALE_AFTER = 0.05
#: The ledger field that carries a reserved turn to the task's next attempt.
_TURN_FIELD = "rate_turn"


class RateLimitWait(AgentQError):
    """This task's turn is later than a handler may wait: reschedule it for ``at``.

    Raised by :meth:`RateLimiter.admit` before the handler runs; the executor acks
    the delivery and sends the task again for ``at`` (not a failure). ``reserved``
    says whether the turn at ``at`` is this task's (kept for its next attempt by
    :meth:`keep_turn`) or only when it may ask again.
    """

    def __init__(self, tool: str, at: datetime, *, attempt: int, reserved: bool) -> None:
        what = "its turn" if reserved else "the tool's turns come into reach"
        super().__init__(f"tool {tool!r} is rate limited: rescheduled until {what} at {at}")
        self.tool = tool
        self.at = at
        self.attempt = attempt
        self.reserved = reserved

    def keep_turn(self, record: MutableMapping[str, Any]) -> None:
        """Record the reserved turn in the task's ledger record, for the attempt the
        reschedule creates. Idempotent: a re-run transaction writes the same value."""
        if self.reserved:
            record[_TURN_FIELD] = {"attempt": self.attempt + 1, "at": to_micros(self.at)}
        else:
            record.pop(_TURN_FIELD, None)


def reserved_turn(record: Mapping[str, Any]) -> datetime | None:
    """The turn a rescheduled task reserved for its current attempt, if any."""
    turn = record.get(_TURN_FIELD)
    if not isinstance(turn, dict) or turn.get("attempt") != record.get("attempt"):
        return None
    at = turn.get("at")
    return from_micros(at) if isinstance(at, int) else None


@dataclass(frozen=True)
class _Limit:
    interval: int  # microseconds between turns (rounded up: never faster than asked)
    tau: int  # microseconds of burst tolerance
    horizon: int  # microseconds ahead that turns may be reserved

    @classmethod
    def of(cls, rate: float, burst: int) -> _Limit:
        interval = max(1, math.ceil(1_000_000 / rate))
        return cls(interval, (burst - 1) * interval, max(int(RESERVE_AHEAD * 1e6), 2 * interval))

    def start(self, tat: int, now: int) -> int:
        """``max(tat, now)``, pulled back to the furthest ``tat`` a reservation can
        leave (a ``tat`` beyond it means the clock went back or the policy changed)."""
        return min(max(tat, now), now + self.horizon + self.interval + self.tau)


def gcra(tat: int, now: int, limit: _Limit, n: int) -> tuple[int, list[int]]:
    """Reserve up to ``n`` turns at ``now`` (all in microseconds since the epoch).

    Returns the new ``tat`` and the turns' times, earliest first; turns further
    than the horizon ahead are not reserved, so the list may be short or empty.
    A ``tat`` further ahead than any reservation could have put it (the clock
    went back, or the policy changed) is pulled back to that bound; the caller
    stores the pulled-back value, so the tool's turns come within reach as time
    passes instead of the bound moving on with the clock.
    """
    start = limit.start(tat, now)
    turns: list[int] = []
    for i in range(n):
        at = max(now, start + i * limit.interval - limit.tau)
        if at - now > limit.horizon:
            break
        turns.append(at)
    return start + len(turns) * limit.interval, turns


@dataclass
class _Local:
    """One worker's view of one tool: spare turns and who waits for one."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    fetch: threading.Lock = field(default_factory=threading.Lock)  # one reservation at a time
    spare: deque[int] = field(default_factory=deque)
    waiting: int = 0  # threads in ``take`` not yet served (queued for ``fetch``)


class RateLimiter:
    """One worker's gate to its tools' shared rate limits.

    ``admit(tool, record)`` is called in the handler thread right before the
    handler: it returns when the task may call the tool, or raises
    :class:`RateLimitWait` when the task's turn is more than ``max_wait`` ahead.
    """

    def __init__(
        self, backend: Backend, clock: Clock, policy: Policy, *, max_wait: float = MAX_WAIT
    ) -> None:
        self._backend = backend
        self._clock = clock
        self._policy = policy
        self.max_wait = max_wait
        self._locals: dict[str, _Local] = {}
        self._lock = threading.Lock()
        #: Reservation transactions made (a test and telemetry signal).
        self.reservations = 0

    def admit(self, tool: str, record: Mapping[str, Any]) -> None:
        """Wait for this task's turn to call ``tool`` (no-op for unlimited tools)."""
        attempt = int(record.get("attempt", 0))
        turn = reserved_turn(record)
        reserved = True
        if turn is None:
            if self._policy.rate_limit(tool) is None:
                return
            turn, reserved = self.take(tool)
        wait = (turn - self._clock.now()).total_seconds()
        if wait > self.max_wait or not reserved:
            raise RateLimitWait(tool, turn, attempt=attempt, reserved=reserved)
        if wait > 0:
            self._clock.sleep(wait)

    def take(self, tool: str) -> tuple[datetime, bool]:
        """Take the next turn of a limited tool: ``(time, True)``; or, when no turn
        is within the reservation horizon, ``(when to ask again, False)``."""
        limit = self._policy.rate_limit(tool)
        if limit is None:
            raise ValueError(f"tool {tool!r} has no rate limit")
        rule = _Limit.of(*limit)
        local = self._local(tool)
        with local.lock:
            local.waiting += 1
        counted = True
        try:
            with local.fetch:
                with local.lock:
                    # Served from here on: no longer waiting. Counting this thread
                    # until after it let go of ``fetch`` made the next thread reserve
                    # a turn for it again, a turn no task uses (the tool's budget).
                    local.waiting -= 1
                    counted = False
                    turn = self._spare(local)
                    wanted = local.waiting + 1  # this thread and those queued behind it
                if turn is not None:
                    return from_micros(turn), True
                turns, later = self._reserve(tool, rule, wanted)
                if not turns:
                    return from_micros(later), False
                with local.lock:
                    local.spare.extend(turns[1:])
                return from_micros(turns[0]), True
        finally:
            if counted:  # interrupted before it was served
                with local.lock:
                    local.waiting -= 1

    def _local(self, tool: str) -> _Local:
        with self._lock:
            return self._locals.setdefault(tool, _Local())

    def _spare(self, local: _Local) -> int | None:
        oldest = to_micros(self._clock.now()) - int(_STALE_AFTER * 1e6)
        while local.spare:
            turn = local.spare.popleft()
            if turn >= oldest:
                return turn
        return None

    def _reserve(self, tool: str, rule: _Limit, n: int) -> tuple[list[int], int]:
        """One transaction: up to ``n`` turns, or (none) when to ask again."""

        def reserve(tx: Transaction) -> tuple[list[int], int]:
            now = to_micros(tx.now)
            record = tx.get_record(RATE_LIMITS, tool)
            stored = None if record is None else record.get("tat")
            # A record agentq did not write counts as an idle tool, never as an error
            # in every handler of it.
            tat = stored if isinstance(stored, int) and not isinstance(stored, bool) else now
            new_tat, turns = gcra(tat, now, rule, n)
            if new_tat != tat:  # turns taken, or a tat pulled back (it must stay back)
                tx.put_record(RATE_LIMITS, tool, {"tat": new_tat, "interval_us": rule.interval})
            # No turn within the horizon: ask again once the next comes into it.
            return turns, new_tat - rule.tau - rule.horizon

        result = self._backend.transact(reserve, durable=False)
        with self._lock:
            self.reservations += 1
        return result
