"""The per-minute tallies of finished tasks, added where tasks finish.

The console's throughput and latency chart (:mod:`agentq.console.charts`)
reads these, not the ledger: for each minute, owner and outcome (succeeded or
dead) how many action tasks ended, with their last attempt's run time in a
fixed histogram of :data:`BUCKETS` log-spaced buckets (eight a decade from
1 ms, so a percentile read from it is a bucket's middle: within about 15 % of
the run time it stands for). The transaction that finishes tasks adds their
tallies once (:func:`add`): every final record goes through
:func:`~agentq.lifecycle.consequences.write_final`, and the executor's plain
successes, written as a set, add the group's tallies at once
(:mod:`agentq.executor.outcomes`). The backend keeps them so that concurrent
completions neither wait on nor fail each other (:mod:`agentq.backends.tallies`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from agentq.backends import Transaction
from agentq.backends.tallies import OUTCOMES, Tally
from agentq.clock import moment

__all__ = [
    "BUCKETS",
    "FLOOR",
    "PER_DECADE",
    "add",
    "add_finished",
    "bucket_of",
    "bucket_seconds",
    "minute_of",
    "percentile",
    "tally_of",
]

#: Buckets a decade of run times (from :data:`FLOOR` seconds up).
PER_DECADE = 8
#: The run time below which every run is bucket 0 (1 ms).
FLOOR = 0.001
#: How many buckets: bucket 0 below 1 ms, then eight a decade up to the last,
#: which also holds every longer run (from about 15 hours).
BUCKETS = 64


def bucket_of(seconds: float | None) -> int:
    """The histogram bucket of a run time (-1: none known, or negative)."""
    if seconds is None or seconds < 0 or math.isnan(seconds):
        return -1
    if seconds < FLOOR:
        return 0
    return min(BUCKETS - 1, 1 + int(PER_DECADE * math.log10(seconds / FLOOR)))


def bucket_seconds(bucket: int) -> float:
    """The run time a bucket stands for: its geometric middle (half the floor
    for bucket 0)."""
    if bucket <= 0:
        return FLOOR / 2
    return float(FLOOR * 10 ** ((bucket - 0.5) / PER_DECADE))


def percentile(counts: Mapping[int, int], p: int) -> float | None:
    """The ``p``-th percentile (nearest rank) of a histogram (bucket -> count),
    as its bucket's :func:`bucket_seconds`; None without any run time."""
    known = sorted((b, n) for b, n in counts.items() if b >= 0 and n > 0)
    total = sum(n for _, n in known)
    if not total:
        return None
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for bucket, n in known:
        seen += n
        if seen >= rank:
            return bucket_seconds(bucket)
    return bucket_seconds(known[-1][0])  # pragma: no cover - the ranks add up


def minute_of(when: datetime) -> int:
    """Minutes since the Unix epoch (UTC) of ``when``."""
    return int(when.timestamp() // 60)


def tally_of(
    rec: Mapping[str, Any], status: str | None = None, finished: datetime | None = None
) -> Tally | None:
    """The tally of one finished task (None for a task the chart does not
    count: not an action, or not succeeded or dead). ``status`` and
    ``finished`` default to the record's own."""
    status = str(rec.get("status")) if status is None else status
    if status not in OUTCOMES or rec.get("kind", "action") != "action":
        return None
    ended = finished if finished is not None else moment(rec.get("finished_at"))
    if ended is None:
        return None
    started = moment(rec.get("started_at"))
    ran = None if started is None else (ended - started).total_seconds()
    owner = rec.get("created_by", "local")
    return Tally(minute_of(ended), "" if owner is None else str(owner), status,
                 bucket_of(ran), 1)  # fmt: skip


def add(tx: Transaction, tallies: Iterable[Tally | None]) -> None:
    """Add the tallies (the Nones left out) in ``tx``, summed per key: one call
    of :meth:`~agentq.backends.base.Transaction.add_tallies` for a group."""
    sums: dict[tuple[int, str, str, int], int] = {}
    for t in tallies:
        if t is not None:
            key = (t.minute, t.owner, t.outcome, t.bucket)
            sums[key] = sums.get(key, 0) + t.count
    if sums:
        tx.add_tallies([Tally(*key, n) for key, n in sums.items()])


def add_finished(tx: Transaction, recs: Sequence[Mapping[str, Any]]) -> None:
    """:func:`add` the tallies of final records ``recs``."""
    add(tx, map(tally_of, recs))
