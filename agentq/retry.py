"""Retry decisions as plain values.

A handler failure is one of:

* :class:`RetryLater` — try again after a given delay (HTTP 429/503 with
  ``Retry-After``); it does not use up an attempt, and the tool is held back
  until then;
* :class:`PermanentError` — never retried: the task goes to the dead-letter queue;
* any other exception — retried with exponential backoff and jitter, up to the
  tool's ``max_attempts``, then dead-lettered.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentq.errors import AgentQError

__all__ = ["PermanentError", "RetryLater", "RetryPolicy"]


class RetryLater(AgentQError):
    """Ask the runtime to run this task again after ``after`` seconds."""

    def __init__(self, after: float, reason: str = "retry later") -> None:
        super().__init__(f"{reason} (retry after {after:.3f}s)")
        self.after = max(float(after), 0.0)
        self.reason = reason


class PermanentError(AgentQError):
    """A failure that no retry can fix; the task is dead-lettered at once."""


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
