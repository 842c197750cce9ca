"""Tallies of finished tasks per minute (the console's chart), in the backend.

A :class:`Tally` counts the tasks of one owner that ended with one outcome in
one minute, with their run times in one bucket of a fixed histogram (the
buckets are the runtime's, :mod:`agentq.lifecycle.tallies`; the backend only
adds them up). The runtime adds a completion group's tallies in the
transaction that finishes its tasks (:meth:`~agentq.backends.base.Transaction.add_tallies`);
the chart reads a window's (:meth:`~agentq.backends.base.Backend.read_tallies`),
rows whose number grows with the minutes shown, not with the tasks; a prune
deletes old ones (:meth:`~agentq.backends.base.Backend.delete_tallies`).

How each backend keeps them so that concurrent completions do not wait on
one another: SQLite (one writer at a time) upserts a row per minute, owner,
outcome and bucket; PostgreSQL appends rows to a table with no index that no
write reads and folds them into the keyed table when they are read (as
:mod:`~agentq.backends.postgres.totals` does for the record counts);
Spanner writes each transaction's tallies as one record of its own under a
fresh key (a blind write), summed when read (:func:`record_tally`,
:func:`tallies_from_records`). A worker's pruner compacts the past minutes
every pass (:meth:`~agentq.backends.base.Backend.compact_tallies`): the
changes folded, a minute's records merged into one (:func:`merged`), so a
read costs one row per minute, owner, outcome and bucket, not one per
transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OUTCOMES",
    "TALLY_TABLE",
    "Tally",
    "check_tallies",
    "check_window",
    "group",
    "merged",
    "record_key",
    "record_tally",
    "tallies_from_records",
]

#: The outcomes a tally counts (a task that ended succeeded, or dead).
OUTCOMES = ("succeeded", "dead")
#: The record table that holds tallies on a backend without a table of their
#: own (Spanner): one record per transaction that added some.
TALLY_TABLE = "task_tallies"


@dataclass(frozen=True)
class Tally:
    """``count`` tasks of ``owner`` that ended ``outcome`` in the minute
    ``minute`` (minutes since the Unix epoch, UTC) with a run time in histogram
    bucket ``bucket`` (-1: no run time known)."""

    minute: int
    owner: str
    outcome: str
    bucket: int
    count: int


def check_window(first_minute: int, end_minute: int, width: int) -> None:
    """ValueError for a window :meth:`Backend.read_tallies` cannot read."""
    if width < 1:
        raise ValueError(f"a tally slot is at least 1 minute wide, got {width}")
    if end_minute < first_minute:
        raise ValueError(f"the window ends ({end_minute}) before it starts ({first_minute})")


def check_tallies(tallies: Sequence[Tally]) -> None:
    """ValueError for a tally no backend stores: an unknown outcome, a count
    below 1, a bucket below -1."""
    for t in tallies:
        if t.outcome not in OUTCOMES or t.count < 1 or t.bucket < -1:
            raise ValueError(f"not a tally of finished tasks: {t!r}")


def group(
    tallies: Iterable[Tally], first_minute: int = 0, width: int = 1, owner: str | None = None
) -> list[Tally]:
    """``tallies`` summed per slot of ``width`` minutes from ``first_minute``
    (a slot's minute: its first), outcome and bucket; with ``owner``, only
    that owner's, else every owner's summed (owner ``""``). Sorted."""
    sums: dict[tuple[int, str, str, int], int] = {}
    for t in tallies:
        if owner is not None and t.owner != owner:
            continue
        slot = first_minute + (t.minute - first_minute) // width * width
        key = (slot, t.owner if owner is not None else "", t.outcome, t.bucket)
        sums[key] = sums.get(key, 0) + t.count
    return [Tally(m, o, out, b, n) for (m, o, out, b), n in sorted(sums.items()) if n]


def merged(tallies: Iterable[Tally]) -> list[Tally]:
    """``tallies`` summed per minute, owner, outcome and bucket (owners kept
    apart): what a backend that stores several rows of one minute compacts
    them into. Sorted."""
    sums: dict[tuple[int, str, str, int], int] = {}
    for t in tallies:
        key = (t.minute, t.owner, t.outcome, t.bucket)
        sums[key] = sums.get(key, 0) + t.count
    return [Tally(m, o, out, b, n) for (m, o, out, b), n in sorted(sums.items()) if n]


def record_key(minute: int) -> str:
    """A fresh key for one transaction's tally record of ``minute``: minute first
    (a window is a key range), then a random part (no two writers share one)."""
    return f"{minute:012d}/{uuid.uuid4().hex}"


def record_tally(tallies: Sequence[Tally]) -> dict[int, dict[str, Any]]:
    """One transaction's ``tallies`` as records, one per minute: minute -> value."""
    out: dict[int, dict[str, Any]] = {}
    for t in tallies:
        rec = out.setdefault(t.minute, {"minute": t.minute, "rows": []})
        rec["rows"].append([t.owner, t.outcome, t.bucket, t.count])
    return out


def tallies_from_records(values: Iterable[Mapping[str, Any]]) -> list[Tally]:
    """The tallies that records made by :func:`record_tally` hold."""
    out = []
    for value in values:
        minute = int(value["minute"])
        for owner, outcome, bucket, count in value.get("rows", ()):
            out.append(Tally(minute, str(owner), str(outcome), int(bucket), int(count)))
    return out
