"""Retention of the records that grow with use but are no one task's own.

Task records, and the rows that go with each one, are :mod:`agentq.lifecycle.retention`'s.
Three more kinds of record grow with use, one per distinct name ever used, and
each is deleted here by its own rule, never while something still needs it:

* **dedupe keys** (:mod:`agentq.lifecycle.dedupe`, ``tool:key`` → the key's
  task): a key only ever collapses calls into its task while that task is
  pending, so it is deleted once its task is gone, pruned after its own
  retention. A key therefore lives exactly as long as the task it names, and a
  pending task's key is never touched.
* **per-key slot records** (:mod:`agentq.keylimits`, one per tool and key
  value): deleted once every slot it lists ended longer ago than the tool's
  retention and no task on its waiting list is unfinished. A running task's
  worker extends its slot every lease, so a held slot is never that old.
* **worker records** (``workers``, one per worker id, for ``agentq workers``):
  deleted once the worker's last heartbeat is older than the runtime's
  retention, and never sooner than :data:`LONG_GONE` (nor than its own
  heartbeat timeout): a live worker rewrites its record every beat.

Like tasks, a batch at a time: a page read outside any transaction and decided
there, then one short transaction that deletes each chosen record only if it is
still the version that was read (a record written meanwhile — a new task for the
key, a slot taken, a beat — is left for the next pass).

What needs no pruning, and why: joins lists are deleted by the transaction that
finishes their prerequisite, which is never pruned unfinished; ordering-key
records by the lifecycle once the key has no task left; idempotency keys,
approvals and out-of-band arguments go with their task; rate-limit state and
holds are one record per tool, schedules one per declared schedule (kept after
removal: its generation counter keeps run ids from repeating); dead-letter
entries are an operator's to delete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from agentq import keylimits
from agentq.backends import Backend, Transaction
from agentq.ledger import TERMINAL, Tables
from agentq.lifecycle import dedupe

__all__ = [
    "LONG_GONE",
    "GoneTasks",
    "prune_dedupe_keys",
    "prune_key_slots",
    "prune_workers",
    "stamp",
    "tasks_gone",
]

#: A worker's record is never deleted sooner than this after its last beat,
#: whatever period is asked for (``agentq prune --older-than 0s``).
LONG_GONE: Final = timedelta(hours=1)

Page = list[tuple[str, dict[str, Any]]]
#: Of these task ids, those whose task is gone (or, in a dry run, goes in this pass).
GoneTasks = Callable[[list[str]], set[str]]


def _sweep(
    backend: Backend,
    table: str,
    batch_size: int,
    choose: Callable[[Page], Page],
    dry_run: bool,
    still: Callable[[Transaction, dict[str, Any]], bool] = lambda tx, rec: True,
) -> Iterator[int]:
    """Page through ``table``; of each page, delete the records ``choose`` picks
    (and ``still`` confirms inside the transaction) if they were not written since
    the read. Yields the count of each batch."""
    after = ""
    while True:
        page = backend.list_records(table, limit=batch_size, after=after)
        chosen = choose(page) if page else []
        if chosen and not dry_run:

            def delete(tx: Transaction, chosen: Page = chosen) -> int:
                deleted = 0
                for key, seen in chosen:
                    if tx.get_record(table, key) != seen or not still(tx, seen):
                        continue  # written since the read: decided again next pass
                    deleted += tx.delete_record(table, key)
                return deleted

            # Not durable: a delete lost to a power failure is simply made again.
            yield backend.transact(delete, durable=False)
        else:
            yield len(chosen)
        if len(page) < batch_size:
            return
        after = page[-1][0]


def prune_dedupe_keys(
    backend: Backend, gone: GoneTasks, batch_size: int, *, dry_run: bool
) -> Iterator[int]:
    """Delete the dedupe keys whose task is gone (see the module docstring)."""

    def choose(page: Page) -> Page:
        named = {key: str(rec.get("task_id")) for key, rec in page}
        missing = gone(sorted(set(named.values())))
        return [(key, rec) for key, rec in page if named[key] in missing]

    def still(tx: Transaction, rec: dict[str, Any]) -> bool:
        return tx.get_record(Tables.TASKS, str(rec.get("task_id"))) is None

    return _sweep(backend, dedupe.TABLE, batch_size, choose, dry_run, still)


def prune_key_slots(
    backend: Backend,
    keep_for: Callable[[str], timedelta | None],
    now: datetime,
    batch_size: int,
    *,
    dry_run: bool,
) -> Iterator[int]:
    """Delete the slot records that hold nothing and were last held before their
    tool's retention (``keep_for(tool)``; ``None``: kept), if no task waits on them."""

    def idle(key: str, rec: dict[str, Any]) -> bool:
        keep = keep_for(key.split(":", 1)[0])  # slot keys are "tool:digest"
        until = keylimits.held_until(rec)
        return keep is not None and (until is None or until < now - keep)

    def choose(page: Page) -> Page:
        chosen = []
        for key, rec in page:
            if not idle(key, rec):
                continue
            waiting = keylimits.waiting_tasks(rec)
            found = backend.read_records(Tables.TASKS, waiting) if waiting else {}
            if all(r.value.get("status") in TERMINAL for r in found.values()):
                chosen.append((key, rec))
        return chosen

    # A record not written since the read still holds nothing: time only moves on.
    return _sweep(backend, keylimits.KEY_SLOTS, batch_size, choose, dry_run)


def prune_workers(
    backend: Backend, keep: timedelta, now: datetime, batch_size: int, *, dry_run: bool
) -> Iterator[int]:
    """Delete the records of workers last heard from before ``now - keep`` (and at
    least :data:`LONG_GONE` and their own heartbeat timeout ago)."""

    def gone(rec: dict[str, Any]) -> bool:
        last = stamp(rec.get("heartbeat_at"))
        if last is None:
            return False  # unreadable: kept, never guessed old
        own = timedelta(seconds=_seconds(rec.get("timeout_s")))
        return last < now - max(keep, LONG_GONE, own)

    def choose(page: Page) -> Page:
        return [(key, rec) for key, rec in page if gone(rec)]

    return _sweep(backend, Tables.WORKERS, batch_size, choose, dry_run)


def tasks_gone(backend: Backend) -> GoneTasks:
    """Of some task ids, those with no task record."""

    def gone(task_ids: Sequence[str]) -> set[str]:
        found = backend.read_records(Tables.TASKS, list(task_ids)) if task_ids else {}
        return {t for t in task_ids if t not in found}

    return gone


def _seconds(value: Any) -> float:
    """A record's count of seconds; 0 for anything else (a record agentq did not write)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e9
    return float(value) if ok else 0.0


def stamp(value: Any) -> datetime | None:
    """A record's ISO time stamp, or ``None`` if it is not one (with its zone)."""
    try:
        when = datetime.fromisoformat(str(value))
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else None
