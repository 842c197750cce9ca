"""Retry decisions as plain values.

A handler failure is one of:

* :class:`RetryLater` — try again after a given delay (HTTP 429/503 with
  ``Retry-After``); it does not use up an attempt, and the tool is held back
  until then — up to the tool's cap (``max_retry_after``, default 1 h): a longer
  delay is not trusted, and :func:`judge_retry_later` turns it into an ordinary
  failure (exponential backoff, counted against ``max_attempts``) whose error
  says why. One bad header must not freeze a tool on every worker;
* :class:`PermanentError` — never retried: the task goes to the dead-letter queue;
* any other exception — retried with exponential backoff and jitter, up to the
  tool's ``max_attempts``, then dead-lettered.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from agentq.errors import AgentQError

__all__ = [
    "DEFAULT_MAX_RETRY_AFTER",
    "OutcomeUnknown",
    "PermanentError",
    "RetryLater",
    "RetryPolicy",
    "Throttle",
    "hold_in_force",
    "judge_retry_later",
]

#: Seconds of ``Retry-After`` honoured when a policy sets no ``max_retry_after``.
DEFAULT_MAX_RETRY_AFTER = 3600.0


class RetryLater(AgentQError):
    """Ask the runtime to run this task again after ``after`` seconds.

    Honoured up to the tool's ``max_retry_after`` (see :func:`judge_retry_later`);
    ``after`` may be infinite (then it always exceeds the cap), never NaN.
    """

    def __init__(self, after: float, reason: str = "retry later") -> None:
        seconds = float(after)
        if math.isnan(seconds):
            # NaN compares false with everything: it would slip past the cap.
            raise ValueError(f"RetryLater needs a number of seconds, got {after!r}")
        super().__init__(f"{reason} (retry after {seconds:.3f}s)")
        self.after = max(seconds, 0.0)
        self.reason = reason


class PermanentError(AgentQError):
    """A failure that no retry can fix; the task is dead-lettered at once."""


class OutcomeUnknown(AgentQError):
    """Raised by a handler that cannot tell whether its call took effect (the
    answer was lost). For a tool declared ``idempotent=False`` the call is then
    reconciled or parked for an operator, never simply made again."""


@dataclass(frozen=True)
class RetryPolicy:
    """Task-level retries: the n-th failure waits about
    ``initial * multiplier ** (n - 1)`` seconds (capped at ``max_delay``), with
    "equal jitter" (between half and all of it) so retries of many tasks spread out.
    """

    max_attempts: int = 5
    initial: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 300.0
    jitter: bool = True
    max_throttles: int = 50

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("retry delays must be non-negative and multiplier >= 1")

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``failures``-th failure."""
        base = min(self.initial * self.multiplier ** max(failures - 1, 0), self.max_delay)
        if not self.jitter:
            return base
        return base / 2 + (rng or random).random() * base / 2

    def exhausted(self, failures: int) -> bool:
        """Whether a task that failed ``failures`` times has used up its attempts."""
        return failures >= self.max_attempts


class Throttle(NamedTuple):
    """What a :class:`RetryLater` amounts to under the tool's cap.

    ``until`` is when the task (and the tool-wide hold) may run again, never more
    than the cap ahead; ``None`` means the delay exceeded the cap and the task
    fails as an ordinary failure with ``error``.
    """

    until: datetime | None
    error: str


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def judge_retry_later(exc: RetryLater, now: datetime, cap: float) -> Throttle:
    """Honour ``exc.after`` if it is at most ``cap`` seconds, else refuse it.

    The comparison happens before any date arithmetic, so an absurd delay (1e20 s,
    infinity) cannot overflow a datetime either.
    """
    error = f"{type(exc).__name__}: {exc}"
    if exc.after > cap:
        after = "an infinite delay" if math.isinf(exc.after) else f"{_seconds(exc.after)} s"
        return Throttle(
            None,
            f"{error}: Retry-After of {after} exceeds this tool's cap of {_seconds(cap)} s "
            "(max_retry_after), so it is retried as an ordinary failure",
        )
    return Throttle(now + timedelta(seconds=exc.after), error)


def hold_in_force(record: Mapping[str, Any] | None, now: datetime, cap: float) -> datetime | None:
    """Until when a tool-wide hold record holds the tool back, or ``None``.

    A hold further ahead than the cap cannot have been written under it (a ledger
    from before the cap existed, or another program): it is ignored rather than
    trusted to freeze the tool.
    """
    if record is None:
        return None
    try:
        until = datetime.fromisoformat(record["until"])
        if (until - now).total_seconds() > cap:
            return None
    except (KeyError, TypeError, ValueError):
        return None  # not a hold agentq wrote: it must not make every claim fail
    return until
