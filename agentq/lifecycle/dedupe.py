"""Dedupe keys: the dirty-flag pattern, a burst of calls run once.

An enqueue with ``dedupe_key=K`` *collapses* into the task an earlier call with
the same key created when that task is still **pending**, and then creates
nothing: the call returns the pending task. Otherwise it creates a task as
usual, which becomes the key's task. The rule, exactly: a call of tool ``T``
with key ``K`` collapses into the key's task ``P`` when all of these hold,
read in the call's own transaction:

* ``P`` is ``queued`` and was never checkpointed: no handler has started on
  the attempt that will run (a first delivery deferred by a rate limit or a
  hold is still pending: its handler never ran);
* the call is the same call: same tool and same arguments (a digest of their
  canonical JSON). A call with other arguments is never dropped: it becomes a
  task of its own, and the key's task from then on;
* the same ordering key, and ``P`` is the last task of that ordering key (so
  nothing enqueued after ``P`` runs before work the call asked for);
* ``P`` runs no later than the call would (its scheduled time, if any, is not
  after the call's own delivery time).

Why this never misses a change (the dirty flag's promise): a collapse commits
before ``P`` is claimed, and a claim and a collapse both read ``P``'s record in
their transactions, so they are serialised; ``P``'s handler therefore starts
after the collapsing call's transaction committed and reads the state it
wrote. Once ``P`` is claimed (``running``), the next call creates a new task.

Keys are per tool (the record is named ``tool:key``) and kept, one small
record per key, after the task finishes: the next call overwrites it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentq.backends import Transaction
from agentq.idempotency import args_digest
from agentq.ledger import Tables, TaskStatus

__all__ = ["TABLE", "pending", "remember"]

#: The record table of dedupe keys: ``tool:key`` -> the key's task and its call.
TABLE = "dedupe"


def _name(tool: str, key: str) -> str:
    return f"{tool}:{key}"  # a tool name has no ':' (agentq.tools)


def pending(
    tx: Transaction,
    tool: str,
    key: str,
    args: Mapping[str, Any],
    *,
    ordering_key: str | None,
    deliver: datetime | None,
) -> dict[str, Any] | None:
    """The pending task this call collapses into, or None (see the module docstring)."""
    entry = tx.get_record(TABLE, _name(tool, key))
    if entry is None or entry.get("digest") != args_digest(tool, args):
        return None
    rec = tx.get_record(Tables.TASKS, str(entry["task_id"]))
    if (
        rec is None
        or rec["status"] != TaskStatus.QUEUED
        or rec.get("checkpoint") is not None
        or rec["tool"] != tool
        or rec.get("ordering_key") != ordering_key
    ):
        return None
    if ordering_key is not None and not _last_of_key(tx, ordering_key, str(rec["task_id"])):
        return None
    scheduled = rec.get("next_attempt_at")
    if scheduled:
        when = datetime.fromisoformat(scheduled)
        if when > (deliver or tx.now):
            return None  # it would run later than this call asks: not the same call
    return rec


def _last_of_key(tx: Transaction, ordering_key: str, task_id: str) -> bool:
    rec = tx.get_record(Tables.ORDERING, ordering_key)
    if rec is None:
        return False
    waiting = rec.get("pending") or []
    return waiting[-1] == task_id if waiting else rec.get("active") == task_id


def remember(
    tx: Transaction, tool: str, key: str, args: Mapping[str, Any], task_id: str
) -> None:
    """Make ``task_id`` (just created by this call) the key's task."""
    tx.put_record(
        TABLE, _name(tool, key),
        {"task_id": task_id, "tool": tool, "digest": args_digest(tool, args)},
    )  # fmt: skip
