"""Retention: deleting finished tasks, and the rows that belong to them, once old.

Deleting a task is not a state change, but it is a write of a task record, so it
lives here with every other one. Which tasks may go is read off the transition
table (:mod:`agentq.lifecycle.states`):

* ``succeeded`` and ``cancelled`` have no way out (:data:`FINAL`): once one of
  them is older than its tool's retention, counted from ``finished_at``, it is
  deleted. Nothing can change such a record meanwhile, so the version read
  before the deleting transaction is the one deleted.
* ``dead`` can be replayed, so a dead task goes only once its dead-letter entry
  is gone (deleted by an operator: ``agentq dlq delete``), re-checked inside the
  deleting transaction, where a replay racing the prune is seen.
* Every other status (``awaiting_approval``, ``queued`` however far ahead it is
  scheduled, ``running``, ``retry_scheduled``) is never deleted, whatever its age.

With a task go, in the same transaction: its idempotency key (if the key still
names it: a key is kept exactly as long as its task, so it dedupes for the whole
retention period), its out-of-band arguments (:mod:`agentq.lifecycle.payloads`:
kept until now, so a finished task shows its arguments for as long as it is
kept), and its approval if the task is the approval's action (an approval's
timers name it too) and the approval is decided. Audit entries are deleted once
older than the runtime's retention and about no task that still exists (an
entry about a stray dead letter: once old). Dedupe keys, per-key slot records
and the records of long-gone workers have rules of their own
(:mod:`agentq.lifecycle.retention_records`, which also says what needs none).
The console chart's per-minute tallies of finished tasks are deleted once
older than :data:`TALLIES_KEPT`, whatever the tasks' retention (not counted).
Ordering-key records are deleted by the lifecycle as soon as a key has no task
left, and dead-letter entries are an operator's to delete, so neither is
touched here.

The work is done a batch at a time (:func:`prune_pass`): each batch reads a page
of records outside any transaction, decides there, and deletes in one short
transaction, so a prune never holds the database's write lock for long. Two
pruners may run at once: a record deleted by one is skipped by the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from agentq.approvals import ApprovalStatus
from agentq.backends import Backend, Transaction
from agentq.clock import to_micros
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.lifecycle import audit, payloads, retention_records, run_retention
from agentq.lifecycle.retention_records import GoneTasks, stamp
from agentq.lifecycle.retention_rules import (
    PruneCounts,
    RetentionRules,
    RetentionSetting,
    policy_rules,
    retention_setting,
)
from agentq.lifecycle.retention_scan import TaskScan
from agentq.lifecycle.states import APPROVAL_TRANSITIONS, TASK_TRANSITIONS
from agentq.lifecycle.tallies import minute_of
from agentq.retention import DEFAULT_AUDIT_RETENTION

__all__ = [
    "DEFAULT_BATCH",
    "FINAL",
    "FINAL_APPROVALS",
    "TALLIES_KEPT",
    "PruneCounts",
    "RetentionRules",
    "RetentionSetting",
    "claim_pruning",
    "policy_rules",
    "prune_pass",
    "prune_tallies",
    "retention_setting",
]

#: Task statuses no event leaves: deleted once old.
FINAL: Final = frozenset(s for s in TERMINAL if not any(st == s for st, _ in TASK_TRANSITIONS))
#: Approval statuses no event leaves: deleted with their action task.
FINAL_APPROVALS: Final = frozenset(
    s for s in ApprovalStatus if not any(st == s for st, _ in APPROVAL_TRANSITIONS)
)
#: Terminal statuses that an event can leave (``dead``: replay), deleted only when
#: nothing can take them back (their dead-letter entry is gone).
_REVIVABLE: Final = frozenset(TERMINAL - FINAL)

#: The record table of the pruning claim (:func:`claim_pruning`).
PRUNER_TABLE = "pruner"
#: How long the per-minute tallies of finished tasks (the console's chart,
#: :mod:`agentq.lifecycle.tallies`) are kept: longer than the chart's longest
#: window (a day), whatever the tasks' retention.
TALLIES_KEPT = timedelta(days=2)
#: Records read (and at most deleted) per batch.
DEFAULT_BATCH = 200

_AUDIT_PREFIX = "aud_"


def _finished_at(rec: Mapping[str, Any]) -> datetime | None:
    # Unreadable: kept, never guessed old.
    return stamp(rec.get("finished_at") or rec.get("updated_at"))


def _old_enough(rec: Mapping[str, Any], rules: RetentionRules, now: datetime) -> bool:
    if rec.get("status") not in TERMINAL:
        return False
    keep = rules.for_tool(str(rec.get("tool")))
    finished = _finished_at(rec)
    return keep is not None and finished is not None and finished < now - keep


Get = Callable[[str, str], dict[str, Any] | None]


def _belongings(get: Get, task_id: str, rec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``(table, key)`` rows that go with task ``task_id``."""
    out = []
    key = rec.get("idempotency_key")
    if key:
        entry = get(Tables.IDEMPOTENCY, str(key))
        if entry is not None and entry.get("task_id") == task_id:
            out.append((Tables.IDEMPOTENCY, str(key)))
    approval_id = rec.get("approval_id")
    if approval_id:
        approval = get(Tables.APPROVALS, str(approval_id))
        if (
            approval is not None
            and approval.get("task_id") == task_id  # not an approval's timer
            and approval.get("status") in FINAL_APPROVALS
        ):
            out.append((Tables.APPROVALS, str(approval_id)))
    return out


def _count(counts: PruneCounts, rows: list[tuple[str, str]]) -> None:
    counts.tasks += 1
    for table, _ in rows:
        if table == Tables.IDEMPOTENCY:
            counts.idempotency_keys += 1
        else:
            counts.approvals += 1


def _has_payload(rec: Mapping[str, Any]) -> bool:
    # A record written before payloads were kept until pruning says "released":
    # its row was deleted when it finished.
    return payloads.is_offloaded(rec) and not (rec.get("args_ref") or {}).get("released")


def _prunable(
    backend: Backend, rules: RetentionRules, now: datetime, page: list[tuple[str, dict[str, Any]]]
) -> list[tuple[str, dict[str, Any]]]:
    """The tasks of ``page`` old enough to go, as read outside a transaction."""
    old = [(k, r) for k, r in page if _old_enough(r, rules, now)]
    revivable = [k for k, r in old if r.get("status") in _REVIVABLE]
    if revivable:
        listed = backend.read_records(Tables.DEAD_LETTERS, revivable)
        old = [(k, r) for k, r in old if k not in listed]
    return old


def _prune_tasks(
    backend: Backend,
    rules: RetentionRules,
    now: datetime,
    page: list[tuple[str, dict[str, Any]]],
    dry_run: bool,
) -> PruneCounts:
    old = _prunable(backend, rules, now, page)
    if not old:
        return PruneCounts()
    if dry_run:
        counts = PruneCounts()
        for key, rec in old:
            _count(counts, _belongings(backend.get_record, key, rec))
            counts.payloads += _has_payload(rec)
        return counts

    def delete(tx: Transaction) -> PruneCounts:
        counts = PruneCounts()
        going: list[tuple[str, dict[str, Any]]] = []
        for key, rec in old:
            if rec.get("status") in _REVIVABLE:
                # A replay may have taken it back since the read: decide on what is
                # stored now.
                current = tx.get_record(Tables.TASKS, key)
                if (
                    current is None
                    or current.get("status") != TaskStatus.DEAD
                    or not _old_enough(current, rules, now)
                    or tx.get_record(Tables.DEAD_LETTERS, key) is not None
                ):
                    continue
                rec = current
            going.append((key, rec))
        # As sets (one statement each where the engine allows): a batch's tasks,
        # then what goes with the ones deleted here (another pruner may have been
        # first with some).
        deleted = set(tx.delete_records(Tables.TASKS, [key for key, _ in going]))
        rows_of: dict[str, list[str]] = {}
        offloaded = []
        for key, rec in going:
            if key not in deleted:
                continue
            rows = _belongings(tx.get_record, key, rec)
            for table, row in rows:
                rows_of.setdefault(table, []).append(row)
            _count(counts, rows)
            if payloads.is_offloaded(rec):
                offloaded.append(key)
        for table, rows_in_table in rows_of.items():
            tx.delete_records(table, rows_in_table)
        if offloaded:
            counts.payloads += len(tx.delete_records(Tables.PAYLOADS, offloaded))
        return counts

    # Not durable: a delete lost to a power failure is simply made again.
    return backend.transact(delete, durable=False)


def _prune_audit(
    backend: Backend, keep: timedelta, now: datetime, after: str, limit: int, dry_run: bool
) -> tuple[PruneCounts, str, bool]:
    bound = f"{_AUDIT_PREFIX}{to_micros(now - keep):014x}"  # audit ids grow with time
    page = backend.list_records(Tables.AUDIT, limit=limit, after=after)
    old = [(k, e) for k, e in page if k < bound]
    done = len(old) < len(page) or len(page) < limit
    next_after = old[-1][0] if old else after
    about = [str(e["task_id"]) for _, e in old if e.get("task_id")]
    alive = backend.read_records(Tables.TASKS, about) if about else {}
    gone = [k for k, e in old if not e.get("task_id") or str(e["task_id"]) not in alive]
    if gone and not dry_run:
        dropped = set(gone)
        index = [k for key, e in old if key in dropped for k in audit.index_keys(key, e)]

        def delete(tx: Transaction) -> int:
            if index:
                tx.delete_records(audit.TARGETS, index)
            return len(tx.delete_records(Tables.AUDIT, gone))

        return PruneCounts(audit_entries=backend.transact(delete, durable=False)), next_after, done
    return PruneCounts(audit_entries=len(gone)), next_after, done


def prune_pass(
    backend: Backend,
    rules: RetentionRules,
    now: datetime,
    *,
    runtime_retention: timedelta | None,
    audit_retention: timedelta = DEFAULT_AUDIT_RETENTION,
    batch_size: int = DEFAULT_BATCH,
    dry_run: bool = False,
    since: datetime | None = None,
) -> Iterator[PruneCounts]:
    """One pass over the ledger, then the records of no one task, deleting what is
    older than ``rules`` as of ``now``; yields each batch's counts, so that the
    caller can pause between batches (and stop) while other writers take their turn.

    Dedupe keys follow their tasks, per-key slot records their tool's retention,
    worker records ``runtime_retention`` (``None`` keeps them), audit entries the
    longer of it and ``audit_retention`` (an audit outlives its task);
    see :mod:`agentq.lifecycle.retention_records`. ``since`` (the ``now`` of a
    previous pass) makes it a window pass: only the tasks that became old since
    then, and none of the others (see :mod:`agentq.lifecycle.retention_scan`).
    ``dry_run`` counts what would be deleted and deletes nothing.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    shortest = rules.shortest
    if shortest is not None:
        if since is None:
            scan = TaskScan.full(backend, now, shortest)
        else:
            kept = {r for r in (rules.default, *rules.tools.values()) if r is not None}
            scan = TaskScan.window(backend, since, now, sorted(kept))
        for page in scan.pages(batch_size):
            yield _prune_tasks(backend, rules, now, page, dry_run)
    if not dry_run:
        prune_tallies(backend, now)
    if since is not None:
        return
    gone = _gone_or_going(backend, rules, now) if dry_run else retention_records.tasks_gone(backend)
    for n in retention_records.prune_dedupe_keys(backend, gone, batch_size, dry_run=dry_run):
        yield PruneCounts(dedupe_keys=n)
    slots = retention_records.prune_key_slots(
        backend, rules.for_tool, now, batch_size, dry_run=dry_run
    )
    for n in slots:
        yield PruneCounts(key_slots=n)
    if runtime_retention is None:
        return
    for n in run_retention.prune_runs(backend, runtime_retention, now, batch_size,
                                      dry_run=dry_run):  # fmt: skip
        yield PruneCounts(runs=n)
    for n in run_retention.prune_run_usage(backend, runtime_retention, now, batch_size,
                                           dry_run=dry_run):  # fmt: skip
        yield PruneCounts(run_usage=n)
    workers = retention_records.prune_workers(
        backend, runtime_retention, now, batch_size, dry_run=dry_run
    )
    for n in workers:
        yield PruneCounts(worker_records=n)
    after = ""
    while True:
        counts, after, done = _prune_audit(
            backend, max(runtime_retention, audit_retention), now, after, batch_size, dry_run
        )
        yield counts
        if done:
            break


def _gone_or_going(backend: Backend, rules: RetentionRules, now: datetime) -> GoneTasks:
    """Of some task ids, those with no task record or that this pass deletes (what
    a dry run, which deletes none, counts as gone)."""

    def gone(task_ids: list[str]) -> set[str]:
        found = backend.read_records(Tables.TASKS, task_ids) if task_ids else {}
        going = _prunable(backend, rules, now, [(k, r.value) for k, r in found.items()])
        return {t for t in task_ids if t not in found} | {k for k, _ in going}

    return gone


def prune_tallies(backend: Backend, now: datetime) -> None:
    """The chart's bookkeeping, whatever the tasks' retention (kept forever or
    not), not counted: delete the per-minute tallies older than
    :data:`TALLIES_KEPT`, and merge the rows of each minute before the last one
    (:meth:`~agentq.backends.base.Backend.compact_tallies`: PostgreSQL's
    appended changes, Spanner's one record per transaction), so that what the
    chart reads stays one row per minute between two console reads."""
    backend.delete_tallies(minute_of(now - TALLIES_KEPT))
    backend.compact_tallies(minute_of(now) - 1)


def claim_pruning(backend: Backend, owner: str, now: datetime, ttl: timedelta) -> bool:
    """Claim the database's pruning for ``owner`` until ``now + ttl`` unless another
    owner's claim is still running; returns whether ``owner`` holds it. Only saves
    work: pruners that run at once (a claim that expired mid-pass) are safe.

    The claim is read outside a transaction and written only to take it or to
    renew it once half its time has passed, as an insert or a compare-and-swap
    of the version read, in a fenced transaction (issue 39, item 2.8: a claim
    rewritten at every pass in a SERIALIZABLE transaction aborted application
    transactions that enqueued beside a starting worker)."""
    held = backend.read_records(PRUNER_TABLE, ["claim"]).get("claim")
    if held is not None:
        until = stamp(held.value.get("until"))
        if until is not None and until > now:
            if held.value.get("owner") != owner:
                return False
            if until - now > ttl / 2:
                return True  # still this owner's for long enough: nothing to write
    claim = {"owner": owner, "until": (now + ttl).isoformat()}

    def take(tx: Transaction) -> bool:
        if held is None:
            return tx.insert_record(PRUNER_TABLE, "claim", claim)
        return not tx.replace_records(PRUNER_TABLE, [("claim", held.version, claim)])

    return backend.transact(take, durable=False, fenced=True)
