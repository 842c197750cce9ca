"""Which part of the tasks table a prune pass reads.

Where task ids grow with time (``backend.ordered_keys``: SQLite), a task created
at ``t`` cannot have finished before ``t``, so only ids created before ``now -
retention`` can be old enough, and those form one key range. Two kinds of pass:

* a **full** pass reads every id created before ``now - shortest retention``
  (and every id of another shape: random ids from older versions);
* a **window** pass reads, for each retention ``r`` in force, only the ids
  created in ``[since - r, now - r)``: those that became old enough since the
  previous pass at ``since``. Serving workers make these between full passes,
  so a steady stream costs one read of each task, not one per pass; a task
  that finished long after it was created (an approval decided late, a
  backlog) waits for the next full pass.

Where ids are random (Spanner, whose splits would make time-ordered ids a
hotspot), every pass reads the whole table, a page at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from agentq.backends import Backend
from agentq.clock import to_micros
from agentq.ledger import Tables

__all__ = ["TaskScan"]

_PREFIX = "tsk_"
#: Ids created up to this far off the pruner's clock (clock skew between
#: processes) still fall in the right range.
SKEW = timedelta(minutes=10)

#: (after, before): keys above ``after`` and below ``before`` (None: no end).
Range = tuple[str, str | None]


def _key(when: datetime) -> str:
    return f"{_PREFIX}{to_micros(when):014x}"


class TaskScan:
    """Pages of task records in key ranges (see the module docstring)."""

    def __init__(self, backend: Backend, ranges: Sequence[Range]) -> None:
        self.backend = backend
        self.ranges = list(ranges)

    @classmethod
    def full(cls, backend: Backend, now: datetime, shortest: timedelta) -> TaskScan:
        """Every task that may be older than ``shortest``."""
        if not backend.ordered_keys:
            return cls(backend, [("", None)])
        # "~" sorts after every hex digit: past all ids of that microsecond.
        return cls(backend, [("", _key(now - shortest)), (_key(now + SKEW) + "~", None)])

    @classmethod
    def window(
        cls, backend: Backend, since: datetime, now: datetime, retentions: Sequence[timedelta]
    ) -> TaskScan:
        """The tasks that became older than one of ``retentions`` after ``since``."""
        if not backend.ordered_keys:
            return cls.full(backend, now, min(retentions))
        spans = sorted((since - r - SKEW, now - r) for r in retentions)
        merged: list[list[datetime]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return cls(backend, [(_key(start), _key(end)) for start, end in merged])

    def pages(self, limit: int) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """Pages of at most ``limit`` records, in key order, range after range."""
        for after, before in self.ranges:
            while True:
                page = self.backend.list_records(Tables.TASKS, limit=limit, after=after)
                inside = [(k, r) for k, r in page if before is None or k < before]
                yield inside
                if len(inside) < limit:
                    break
                after = page[-1][0]
