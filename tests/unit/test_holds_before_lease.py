"""The Retry-After holds read before a lease stay usable through the claims made
with it (issue 38 item 2): those claims may not read, so a hold whose half
second ran out during the lease's round trips sent the whole batch to be claimed
in a transaction, one read per task (found profiling the PostgreSQL worker)."""

from __future__ import annotations

from typing import Any

from agentq.clock import FakeClock
from agentq.executor.holds import Holds
from agentq.executor.lease_claims import NoReads
from agentq.policies import Policy


class _Backend:
    """Counts the reads of holds (none is held)."""

    def __init__(self) -> None:
        self.reads = 0

    def read_records(self, table: str, keys: Any) -> dict[str, Any]:
        self.reads += 1
        return {}


def test_a_hold_read_before_a_lease_is_used_after_it() -> None:
    clock = FakeClock()
    holds = Holds(clock, Policy())
    backend = _Backend()
    holds.refresh(backend, clock.now(), ["tool"])  # type: ignore[arg-type]
    clock.advance(0.4)  # the next lease, 0.4 s later
    holds.refresh(backend, clock.now(), ["tool"])  # type: ignore[arg-type]
    clock.advance(0.2)  # its round trips: the claims come 0.6 s after the first read
    assert holds.until(NoReads(), clock.now(), "tool") is None  # no read needed
    assert backend.reads == 2


def test_holds_are_still_read_at_most_every_quarter_second() -> None:
    clock = FakeClock()
    holds = Holds(clock, Policy())
    backend = _Backend()
    for _ in range(10):
        holds.refresh(backend, clock.now(), ["tool"])  # type: ignore[arg-type]
        clock.advance(0.05)
    assert backend.reads == 2  # at 0 and at 0.25 s
