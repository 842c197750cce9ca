"""Retry-After holds: until when a throttled tool is held back.

A 429/503 with ``Retry-After`` holds its tool back on every worker: the hold is
a record (``holds`` table) written with the throttled task's retry, and this
worker also remembers its own holds at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from agentq.backends import Backend
from agentq.clock import Clock
from agentq.ledger import Tables
from agentq.policies import Policy
from agentq.retry import hold_in_force

__all__ = ["Holds"]

#: How long a read of another worker's hold is used before it is read again (s).
_REREAD = 0.5
#: :meth:`Holds.refresh` (before a lease) also re-reads a hold this close to
#: :data:`_REREAD` (s): the claims made with the lease look it up after the
#: lease's round trips and may not read then, so a read that ran out meanwhile
#: sent the whole batch to be claimed in a transaction, one read per task.
_LEASE_MARGIN = 0.25


class _RecordReader(Protocol):
    def get_record(self, table: str, key: str) -> dict[str, Any] | None: ...


class Holds:
    """This worker's view of the tools' Retry-After holds."""

    def __init__(self, clock: Clock, policy: Policy) -> None:
        self.clock = clock
        self.policy = policy
        self.local: dict[str, datetime] = {}
        self._reads: dict[str, tuple[float, datetime | None]] = {}

    def refresh(self, backend: Backend, now: datetime, tools: Sequence[str]) -> None:
        """Read the holds of those of ``tools`` not read in the last quarter
        second, in one read (so that :meth:`until` needs none for at least as
        long: what it is used for follows a lease, see :data:`_LEASE_MARGIN`)."""
        mono = self.clock.monotonic()
        fresh_for = _REREAD - _LEASE_MARGIN
        stale = [t for t in tools if mono - self._reads.get(t, (-1e9, None))[0] >= fresh_for]
        if not stale:
            return
        found = backend.read_records(Tables.HOLDS, stale)
        for tool in stale:
            rec = found.get(tool)
            until = hold_in_force(
                None if rec is None else rec.value, now, self.policy.max_retry_after(tool)
            )
            self._reads[tool] = (mono, until)

    def until(self, reader: _RecordReader, now: datetime, tool: str) -> datetime | None:
        """Until when a Retry-After holds this tool back: this worker's own holds at
        once, other workers' (the holds records) re-read at most every half second,
        not once per task."""
        local = self.local.get(tool)
        if local is not None and local > now:
            return local
        mono = self.clock.monotonic()
        cached = self._reads.get(tool)
        if cached is not None and mono - cached[0] < _REREAD:
            return cached[1]
        rec = reader.get_record(Tables.HOLDS, tool)
        # A hold beyond the tool's Retry-After cap (or not written by agentq) is ignored.
        until = hold_in_force(rec, now, self.policy.max_retry_after(tool))
        self._reads[tool] = (mono, until)
        return until
