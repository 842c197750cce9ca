"""Named fault-injection points for the crash windows that matter.

Tests arm a point to simulate a crash exactly where it hurts:

* ``"after_external_call"`` — the handler returned (its HTTP call is done) and
  the completion has not committed: the task must be redelivered and the
  external system must see the same Idempotency-Key again;
* ``"before_completion_commit"`` — inside the completion transaction;
* ``"after_lease"`` — between receive and running the handler;
* ``"in_decision"`` — inside a decision transaction, after its writes.

A point does nothing unless armed. Arm it with an exception to raise; the
special :class:`WorkerCrash` makes the executor abandon the task without any
further write, as a killed process would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["FaultPoints", "WorkerCrash"]

POINTS = frozenset(
    {"after_external_call", "before_completion_commit", "after_lease", "in_decision"}
)


class WorkerCrash(BaseException):
    """Simulated process death: the executor writes nothing more for the task."""


class FaultPoints:
    """Armed fault points of one runtime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[str, tuple[Callable[[dict[str, object]], bool], BaseException, int]] = {}

    def arm(
        self,
        point: str,
        exc: BaseException,
        *,
        times: int = 1,
        when: Callable[[dict[str, object]], bool] = lambda info: True,
    ) -> None:
        """Raise ``exc`` the next ``times`` times ``point`` is reached and ``when`` holds."""
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r} (known: {sorted(POINTS)})")
        with self._lock:
            self._armed[point] = (when, exc, times)

    def disarm(self, point: str) -> None:
        """Stop raising at ``point``."""
        with self._lock:
            self._armed.pop(point, None)

    def hit(self, point: str, **info: object) -> None:
        """Called by the runtime at ``point``; raises if armed."""
        if not self._armed:
            return
        with self._lock:
            armed = self._armed.get(point)
        # The condition runs outside the lock: a test may block in it.
        if armed is None or not armed[0](info):
            return
        with self._lock:
            current = self._armed.get(point)
            if current is None:
                return
            when, exc, times = current
            if times <= 1:
                del self._armed[point]
            else:
                self._armed[point] = (when, exc, times - 1)
        raise exc
