"""The runtime's retention: deleting finished tasks once they are old.

Workers do this by themselves (:mod:`agentq.executor.pruning`); :meth:`prune`
is the same work on demand (``agentq prune``). What is deleted, and why nothing
unfinished ever is: :mod:`agentq.lifecycle.retention`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agentq.lifecycle.retention import (
    DEFAULT_BATCH,
    PruneCounts,
    RetentionRules,
    policy_rules,
    prune_pass,
)
from agentq.retention import DEFAULT_AUDIT_RETENTION
from agentq.runtime.core import RuntimeCore

__all__ = ["RECLAIM_STEP", "PruneReport", "RetentionMixin"]

#: Bytes of free space given back to the file system per short write transaction.
RECLAIM_STEP = 1 << 20


@dataclass
class PruneReport:
    """What :meth:`RetentionMixin.prune` deleted (``dry_run``: would delete)."""

    counts: PruneCounts = field(default_factory=PruneCounts)
    #: The time the pass decided "old" against (``finished_at`` before
    #: ``now - retention``).
    now: datetime | None = None
    dry_run: bool = False
    #: Bytes of free space returned to the file system (SQLite) afterwards.
    reclaimed_bytes: int = 0
    #: Whether the pass ran to its end (False: ``stop`` was set).
    complete: bool = True


class RetentionMixin(RuntimeCore):
    """The retention operations of :class:`~agentq.runtime.Runtime`."""

    #: How long audit entries are kept at least (``[agentq] audit_retention``):
    #: no pass, ``older_than`` included, deletes a younger one.
    audit_retention: timedelta = DEFAULT_AUDIT_RETENTION

    def retention_rules(self, older_than: timedelta | None = None) -> RetentionRules:
        """How long each tool's finished tasks are kept: the policy's per-tool
        ``retention``, else this runtime's; with ``older_than``, that for every
        tool instead (what ``agentq prune --older-than`` asks for)."""
        if older_than is not None:
            if older_than < timedelta(0):
                raise ValueError(f"older_than must not be negative, got {older_than}")
            return RetentionRules(older_than)
        return policy_rules(self.retention, self.policy)

    def prune(
        self,
        *,
        older_than: timedelta | None = None,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        reclaim: bool = True,
        keep_free: float = 0.0,
        since: datetime | None = None,
        stop: threading.Event | None = None,
        audit_retention: timedelta | None = None,
    ) -> PruneReport:
        """Delete finished tasks older than their retention, with their approvals,
        idempotency keys, out-of-band arguments and audit entries, and the dedupe
        keys, per-key slot records and worker records that are no longer needed
        (:mod:`agentq.lifecycle.retention_records`), a batch of ``batch_size`` records per
        short transaction, waiting ``pause`` seconds (of this runtime's clock)
        between batches so other writers take their turns; then give the space
        back to the file system (``reclaim``; SQLite), but for ``keep_free`` times
        the database's size. ``older_than`` applies to every tool instead of the
        configured retention (even one that is off). ``since`` (a previous pass's
        :attr:`PruneReport.now`) reads only the tasks that became old since then
        (see :mod:`agentq.lifecycle.retention_scan`). ``dry_run`` only counts.
        Setting ``stop`` ends the pass after its batch. Audit entries are kept
        for ``audit_retention`` at least (default: :attr:`audit_retention`),
        whatever ``older_than`` says.
        """
        stop = stop or threading.Event()
        rules = self.retention_rules(older_than)
        now = self.clock.now()
        own_keep = older_than if older_than is not None else self.retention
        report = PruneReport(now=now, dry_run=dry_run)
        batches = prune_pass(
            self.backend, rules, now, runtime_retention=own_keep,
            audit_retention=audit_retention or self.audit_retention, batch_size=batch_size,
            dry_run=dry_run, since=since,
        )  # fmt: skip
        for counts in batches:
            report.counts.add(counts)
            if stop.is_set() or (pause > 0 and self.clock.wait(stop, pause)):
                report.complete = False
                break
        if reclaim and not dry_run and report.counts.total:
            report.reclaimed_bytes = self.reclaim_space(
                pause=pause, stop=stop, keep_free=keep_free
            )
        return report

    def reclaim_space(
        self,
        *,
        limit: int | None = None,
        keep_free: float = 0.0,
        pause: float = 0.0,
        stop: threading.Event | None = None,
    ) -> int:
        """Give the free space of deleted records back to the file system, a
        :data:`RECLAIM_STEP` per short transaction, up to ``limit`` bytes (default:
        all) and keeping ``keep_free`` times the database's size free for reuse;
        returns the bytes given back (0 where the database does this itself, as
        Spanner does)."""
        stop = stop or threading.Event()
        total = 0
        while limit is None or total < limit:
            step = RECLAIM_STEP if limit is None else min(RECLAIM_STEP, limit - total)
            freed = self.backend.reclaim_space(step, keep_free=keep_free)
            total += freed
            if freed < step or stop.is_set() or (pause > 0 and self.clock.wait(stop, pause)):
                break
        return total
