"""Task events of guarded calls: the at-most-once hold-off, parking a call whose
outcome is unknown, and an operator's resolution of it.

A *guarded* tool (``idempotent=False``, a ``reconcile`` handler, or
``at_most_once``) records ``unsettled_call`` on its claim, durably, before its
handler runs; :mod:`agentq.executor.guarded` decides what a later delivery of
such a task does. This module only applies the events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from agentq.backends import Transaction
from agentq.errors import IllegalTransition
from agentq.ledger import TaskStatus
from agentq.lifecycle import consequences, tasks
from agentq.lifecycle.states import Event

__all__ = ["Resolution", "hold_off", "park", "resolve"]


class Resolution(StrEnum):
    """What an operator found out about a parked call."""

    SUCCEEDED = "succeeded"  # it applied: record this result
    RETRY = "retry"  # it did not apply: make the call again (a new attempt)
    FAILED = "failed"  # give up: the task is dead (replayable later)


def hold_off(
    env: tasks.Env, tx: Transaction, rec: Mapping[str, Any], key: Sequence[Any], until: datetime
) -> None:
    """At-most-once: ack this delivery and send the same message again for
    ``until`` (ack before send, one transaction), so no worker gets it before
    then; the run's completion acks the re-sent message (same key)."""
    tx.ack(rec["queue"], tuple(key), must_exist=True)
    tasks.send(env, tx, rec, until)


def park(
    env: tasks.Env,
    tx: Transaction,
    rec: Mapping[str, Any],
    reason: str,
    *,
    ack_key: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Park a task whose call may have applied and cannot be looked up: no message
    stays (``ack_key``: this delivery), nothing runs it again until an operator
    resolves it; it keeps its ordering key and its waiters wait, and frees its
    per-key concurrency slot."""
    held = {"key_slot": None} if rec.get("key_slot") else {}
    new = tasks.moved(rec, Event.PARK, tx.now, error=reason, next_attempt_at=None, **held)
    if ack_key is not None:
        tx.ack(new["queue"], tuple(ack_key), must_exist=True)
    tasks.store(tx, new)
    if held:  # a parked task runs nothing: its per-key slot goes to the next task
        consequences.release_key_slot(env, tx, rec)
    return new


def resolve(
    env: tasks.Env,
    tx: Transaction,
    task_id: str,
    resolution: Resolution,
    *,
    result: Any = None,
    note: str = "",
) -> dict[str, Any]:
    """Apply an operator's finding to a parked (``outcome_unknown``) task:
    succeeded with ``result`` (its waiters are released), retry (a new attempt is
    sent now), or failed (dead, in the dead-letter queue; its waiters are voided)."""
    rec = tasks.read(tx, task_id)
    if rec["status"] != TaskStatus.OUTCOME_UNKNOWN:
        raise IllegalTransition(
            f"task {task_id!r} is {rec['status']}: only an outcome_unknown task can be resolved"
        )
    if resolution is Resolution.SUCCEEDED:
        return tasks.finish(env, tx, rec, Event.RESOLVE, result=result)
    if resolution is Resolution.FAILED:
        why = (
            f"an operator marked the unknown outcome failed: {note}"
            if note
            else ("an operator marked the unknown outcome failed")
        )
        # Settled by the operator: a later replay makes the call afresh.
        return tasks.dead_letter(env, tx, {**rec, "unsettled_call": False}, why, event=Event.FAIL)
    new = tasks.moved(
        rec, Event.REPLAY, tx.now, attempt=int(rec["attempt"]) + 1, deliveries=0,
        unsettled_call=False, error=None, next_attempt_at=None,
    )  # fmt: skip
    tasks.store(tx, new)
    tasks.send(env, tx, new, None)
    return new
