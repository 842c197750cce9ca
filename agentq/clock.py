"""Time, injected.

Every time-dependent rule in agentq (leases, delivery times, backoff, TTL,
escalations) reads time through a :class:`Clock`. Production code uses
:class:`SystemClock`; tests use :class:`FakeClock`, whose :meth:`FakeClock.advance`
moves time forward and wakes every sleeper whose deadline has passed, so a
72-hour escalation is tested in microseconds instead of waited for.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock", "from_micros", "moment", "to_micros"]


@runtime_checkable
class Clock(Protocol):
    """Source of time for everything in agentq."""

    def now(self) -> datetime:
        """Current wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for durations)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` of this clock's time."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Block until ``event`` is set or ``timeout`` seconds of this clock pass.

        Returns whether the event is set. Callers re-check their own condition
        after waking either way.
        """
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(max(timeout, 0.0))

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock that moves only when told to.

    ``sleep`` and ``wait`` block the calling thread (in real time) until another
    thread calls :meth:`advance` past their deadline, or the event is set. With
    ``auto_advance=True``, ``sleep`` instead moves time forward itself, which suits
    single-threaded tests of backoff schedules.
    """

    def __init__(self, start: datetime | None = None, *, auto_advance: bool = False) -> None:
        if start is None:
            start = datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock start must be timezone-aware")
        self._now = start.astimezone(UTC)
        self._mono = 0.0
        self._lock = threading.Lock()
        self._sleepers: list[tuple[float, int, threading.Event]] = []
        self._sleeper_names: dict[int, str] = {}  # entry seq -> the waiting thread's name
        self._seq = itertools.count()
        self.auto_advance = auto_advance
        self.slept = 0.0

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move time forward and wake sleepers whose deadline has passed."""
        delta = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
        if delta < 0:
            raise ValueError("FakeClock cannot go backwards")
        with self._lock:
            self._now += timedelta(seconds=delta)
            self._mono += delta
            due: list[threading.Event] = []
            while self._sleepers and self._sleepers[0][0] <= self._mono:
                _, seq, event = heapq.heappop(self._sleepers)
                self._sleeper_names.pop(seq, None)
                due.append(event)
            now = self._now
        for event in due:
            event.set()
        return now

    def set(self, when: datetime) -> None:
        """Jump to an absolute time (never backwards)."""
        self.advance((when - self.now()).total_seconds())

    def _register(
        self, timeout: float, event: threading.Event
    ) -> tuple[float, int, threading.Event]:
        with self._lock:
            entry = (self._mono + max(timeout, 0.0), next(self._seq), event)
            if entry[0] <= self._mono:
                event.set()
            else:
                heapq.heappush(self._sleepers, entry)
                self._sleeper_names[entry[1]] = threading.current_thread().name
            return entry

    def _unregister(self, entry: tuple[float, int, threading.Event]) -> None:
        with self._lock:
            if entry in self._sleepers:
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)
                self._sleeper_names.pop(entry[1], None)

    def sleep(self, seconds: float) -> None:
        if self.auto_advance:
            self.slept += max(seconds, 0.0)
            self.advance(max(seconds, 0.0))
            return
        event = threading.Event()
        self._register(seconds, event)
        event.wait()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        timer = threading.Event()
        entry = self._register(timeout, timer)
        try:
            # Wake on whichever comes first: the caller's event or the fake deadline.
            # A short real-time poll on the caller's event avoids helper threads.
            while not event.is_set() and not timer.is_set():
                event.wait(0.001)
        finally:
            self._unregister(entry)
        return event.is_set()

    @property
    def sleepers(self) -> int:
        """Number of threads currently waiting on this clock (test signal)."""
        with self._lock:
            return len(self._sleepers)

    def sleeping(self, thread_name: str) -> int:
        """How many threads whose name starts with ``thread_name`` wait on this
        clock now (a test signal: a worker's lease monitor is ``agentq-monitor``,
        its handlers ``agentq-handler-N``)."""
        with self._lock:
            return sum(name.startswith(thread_name) for name in self._sleeper_names.values())

    def wait_for_sleepers(self, count: int, timeout: float = 10.0) -> None:
        """Block (real time, bounded) until at least ``count`` threads wait on this clock.

        Tests use it as a signal that background threads are idle before they
        advance time, instead of sleeping.
        """
        end = time.monotonic() + timeout
        while self.sleepers < count:
            if time.monotonic() > end:
                raise TimeoutError(f"expected {count} sleepers, have {self.sleepers}")
            time.sleep(0.0005)

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"


def to_micros(when: datetime) -> int:
    """Microseconds since the Unix epoch for a timezone-aware datetime."""
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: agentq needs timezone-aware times")
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    """Inverse of :func:`to_micros`, in UTC."""
    return _EPOCH + timedelta(microseconds=micros)


def moment(value: Any) -> datetime | None:
    """A datetime from a datetime or an ISO 8601 string (as records keep them);
    None for anything else. A naive one is taken as UTC."""
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
