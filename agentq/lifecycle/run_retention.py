"""Retention of durable agent runs: a finished run goes once it is old.

A run that succeeded, failed or was cancelled is deleted once its last change
(``updated_at``) is older than the runtime's retention, with the idempotency
key that named it, in one short transaction per page; a run that changed since
the read is decided again on the next pass. Its tasks have their own retention
(:mod:`agentq.lifecycle.retention`): a call's task can outlive its run, never
the other way round (a run's record is read by nothing of its tasks once it is
final). A run still waiting for a turn, its tools or a human is never deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from agentq.backends import Backend, Transaction
from agentq.clock import to_micros
from agentq.ledger import Tables
from agentq.lifecycle.runs import key_record
from agentq.run_info import RUN_TERMINAL

__all__ = ["prune_run_usage", "prune_runs"]


def prune_runs(
    backend: Backend, keep: timedelta, now: datetime, batch_size: int, *, dry_run: bool
) -> Iterator[int]:
    """Delete the finished runs older than ``keep`` (and their keys); yields the
    count of each page (in a dry run: what would be deleted)."""
    # Where run ids grow with time (SQLite, PostgreSQL), a run created after
    # ``now - keep`` cannot be old enough: only the key range below it is read
    # (a pass beside 100,000 runs awaiting approval read all of them: an idle
    # worker's CPU at 59 %). Random ids (Spanner) are read whole.
    ordered = backend.ordered_keys
    # Downwards from the bound: the storage reads only keys below it.
    after = f"run_{to_micros(now - keep):014x}" if ordered else ""
    while True:
        page = backend.list_records(Tables.RUNS, limit=batch_size, after=after,
                                    descending=ordered)  # fmt: skip
        chosen = [(key, rec) for key, rec in page if rec.get("status") in RUN_TERMINAL
                  and datetime.fromisoformat(str(rec["updated_at"])) <= now - keep]  # fmt: skip
        if chosen and not dry_run:

            def delete(tx: Transaction, chosen: list[tuple[str, dict[str, Any]]] = chosen) -> int:
                deleted = 0
                for key, seen in chosen:
                    if tx.get_record(Tables.RUNS, key) != seen:
                        continue  # continued or changed since the read: next pass
                    named = seen.get("idempotency_key")
                    if named is not None:
                        tx.delete_record(Tables.RUN_KEYS, key_record(str(seen["owner"]), named))
                    deleted += tx.delete_record(Tables.RUNS, key)
                return deleted

            yield backend.transact(delete, durable=False)  # a lost delete is made again
        else:
            yield len(chosen)
        if len(page) < batch_size:
            return
        after = page[-1][0]


def prune_run_usage(
    backend: Backend, keep: timedelta, now: datetime, batch_size: int, *, dry_run: bool
) -> Iterator[int]:
    """Delete owners' daily usage records of days over ``keep`` ago (a day's
    budget is only ever read on that day); yields each page's count."""
    oldest = (now - keep).date().isoformat()
    after = ""
    while True:
        page = backend.list_records(Tables.RUN_USAGE, limit=batch_size, after=after)
        chosen = [key for key, rec in page if str(rec.get("day", "")) < oldest]
        if chosen and not dry_run:

            def delete(tx: Transaction, chosen: list[str] = chosen) -> int:
                return sum(tx.delete_record(Tables.RUN_USAGE, key) for key in chosen)

            yield backend.transact(delete, durable=False)
        else:
            yield len(chosen)
        if len(page) < batch_size:
            return
        after = page[-1][0]
