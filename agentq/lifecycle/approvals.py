"""Approval events: request, approve, reject, escalate, expire.

Requesting approval records the approval, the action task (awaiting approval,
no message) and its timers: the escalation (and, if the rule says so, an
expiry) and the approvers' notification. Every decision moves the approval and
its task together and cancels the timers that became moot, in one transaction;
voiding by a cancel lives with the task events (:func:`~agentq.lifecycle.tasks.cancel`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agentq import ordering
from agentq.approvals import ApprovalInfo, ApprovalNotice, ApprovalStatus
from agentq.backends import Transaction
from agentq.errors import ApprovalChanged, ApprovalError, ApprovalNotFound
from agentq.ledger import Tables, TaskStatus
from agentq.lifecycle import tasks
from agentq.lifecycle.states import Event, next_approval_state

__all__ = ["TimerPlan", "decide", "request", "timer_fired", "version"]

_TIMERS = ("escalation_task_id", "notify_task_id", "expiry_task_id")


class TimerPlan:
    """Where an approval's timers go: tool and queue of each (None: not created)."""

    def __init__(
        self,
        *,
        escalate_after: timedelta,
        escalation: tuple[str, str] | None,
        notify: tuple[str, str] | None,
        expire_after: timedelta | None = None,
    ) -> None:
        self.escalate_after = escalate_after
        self.escalation = escalation or (tasks.BUILTIN_ESCALATION, tasks.ESCALATION_QUEUE)
        self.notify = notify
        self.expire_after = expire_after


def request(
    env: tasks.Env,
    tx: Transaction,
    *,
    tool: str,
    queue: str,
    args: dict[str, Any],
    reason: str,
    plan: TimerPlan,
    ordering_key: str | None = None,
    idempotency_key: str | None = None,
    run_at: datetime | None = None,
    callback_url: str | None = None,
) -> ApprovalInfo:
    """Record a call that waits for a human, with its escalation and notification."""
    approval_id = f"apr_{os.urandom(16).hex()}"
    next_approval_state(approval_id, None, Event.REQUEST_APPROVAL)
    task = tasks.create(
        env, tx, tool=tool, queue=queue, args=args, kind="action",
        event=Event.REQUEST_APPROVAL, ordering_key=ordering_key,
        idempotency_key=idempotency_key, approval_id=approval_id, deliver=run_at,
        callback_url=callback_url,
    )  # fmt: skip
    notice = ApprovalNotice(
        approval_id=approval_id, tool=tool, args=args, reason=reason
    ).model_dump(mode="json")
    escalate_at = tx.now + plan.escalate_after
    esc_tool, esc_queue = plan.escalation
    escalation = tasks.create(
        env, tx, tool=esc_tool, queue=esc_queue, args=notice, kind="escalation",
        event=Event.SCHEDULE, approval_id=approval_id, deliver=escalate_at,
    )  # fmt: skip
    expiry_id = None
    if plan.expire_after is not None:
        expiry = tasks.create(
            env, tx, tool=tasks.BUILTIN_EXPIRY, queue=tasks.ESCALATION_QUEUE, args=notice,
            kind="expiry", event=Event.SCHEDULE, approval_id=approval_id,
            deliver=tx.now + plan.expire_after,
        )  # fmt: skip
        expiry_id = expiry["task_id"]
    notify_id = None
    if plan.notify is not None:
        notify = tasks.create(
            env, tx, tool=plan.notify[0], queue=plan.notify[1], args=notice, kind="notify",
            event=Event.ENQUEUE, approval_id=approval_id,
        )  # fmt: skip
        notify_id = notify["task_id"]
    info = ApprovalInfo(
        approval_id=approval_id,
        task_id=task["task_id"],
        tool=tool,
        args=args,
        status=ApprovalStatus.PENDING,
        reason=reason,
        requested_at=tx.now,
        escalate_at=escalate_at,
        escalation_task_id=escalation["task_id"],
        notify_task_id=notify_id,
        expiry_task_id=expiry_id,
        run_at=run_at,
    )
    stored = info.model_dump(mode="json", exclude={"version"})
    tx.put_record(Tables.APPROVALS, approval_id, stored)
    return info.model_copy(update={"version": version(stored)})


def version(rec: Mapping[str, Any]) -> str:
    """An approval's version (its HTTP ETag): a digest of its whole record, so
    any change — escalated, decided, voided, expired — gives a new one."""
    stored = {k: v for k, v in rec.items() if k != "version"}
    text = json.dumps(stored, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _approval(tx: Transaction, approval_id: str) -> dict[str, Any]:
    rec = tx.get_record(Tables.APPROVALS, approval_id)
    if rec is None:
        raise ApprovalNotFound(f"no approval {approval_id!r}")
    return rec


def _detail(rec: dict[str, Any]) -> str:
    if rec.get("decided_by"):
        return f" (by {rec['decided_by']} at {rec.get('decided_at')})"
    if rec.get("decided_at"):
        return f" (since {rec['decided_at']})"
    return ""


def decide(
    env: tasks.Env,
    tx: Transaction,
    approval_id: str,
    event: Event,
    *,
    by: str,
    note: str = "",
    if_version: str | None = None,
) -> dict[str, Any]:
    """A human's approve or reject: the approval, its task and its timers move
    together. Returns the task's new record.

    With ``if_version`` (what the decider saw, from :func:`version`), an approval
    that changed since — escalated, decided, voided — raises
    :class:`~agentq.errors.ApprovalChanged` and nothing is decided."""
    if event not in (Event.APPROVE, Event.REJECT):
        raise ValueError(f"not a human decision: {event}")
    if not by.strip():
        raise ApprovalError(f"approval {approval_id!r}: say who decides (by=...)")
    rec = _approval(tx, approval_id)
    if if_version is not None and version(rec) != if_version:
        raise ApprovalChanged(
            f"approval {approval_id!r} changed since version {if_version!r:.40} was read "
            f"(now {rec['status']}{_detail(rec)}): read it again before deciding"
        )
    status = next_approval_state(approval_id, rec["status"], event, _detail(rec))
    task = tasks.read(tx, rec["task_id"])
    if event is Event.APPROVE:
        new = tasks.moved(task, Event.APPROVE, tx.now)
        tasks.store(tx, new)
        key = new.get("ordering_key")
        if not key or ordering.admit(tx, key, new["task_id"]):
            at = new.get("next_attempt_at")
            due = datetime.fromisoformat(at) if at else None
            tasks.send(env, tx, new, due if due is not None and due > tx.now else None)
    else:
        reason = f"rejected by {by}" + (f": {note}" if note else "")
        new = tasks.finish(env, tx, task, Event.REJECT, error=reason)
    tx.put_record(
        Tables.APPROVALS,
        approval_id,
        {**rec, "status": status, "decided_at": tasks.iso(tx.now), "decided_by": by,
         "decision_note": note},
    )  # fmt: skip
    for timer in _TIMERS:
        tasks.cancel_timer(env, tx, rec.get(timer), f"approval {status}")
    return new


def timer_fired(env: tasks.Env, tx: Transaction, timer: dict[str, Any]) -> None:
    """An approval's escalation or expiry ran (inside its completion transaction).

    The approval is moved only if it still may be (a decision that raced the
    timer has already cancelled it, so this completion's strict ack fails first).
    """
    approval_id = timer.get("approval_id")
    rec = tx.get_record(Tables.APPROVALS, approval_id) if approval_id else None
    if rec is None or rec["status"] not in (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED):
        return
    if timer.get("kind") == "escalation":
        if rec["status"] == ApprovalStatus.PENDING:
            status = next_approval_state(str(approval_id), rec["status"], Event.ESCALATE)
            tx.put_record(
                Tables.APPROVALS, str(approval_id),
                {**rec, "status": status, "escalated_at": tasks.iso(tx.now)},
            )  # fmt: skip
        return
    if timer.get("kind") != "expiry":
        return
    status = next_approval_state(str(approval_id), rec["status"], Event.EXPIRE)
    tx.put_record(
        Tables.APPROVALS, str(approval_id),
        {**rec, "status": status, "decided_at": tasks.iso(tx.now)},
    )  # fmt: skip
    task = tasks.read(tx, rec["task_id"])
    if task["status"] == TaskStatus.AWAITING_APPROVAL:
        tasks.finish(env, tx, task, Event.EXPIRE,
                     error="approval expired: nobody decided before its deadline")  # fmt: skip
    for name in _TIMERS:
        if rec.get(name) != timer["task_id"]:
            tasks.cancel_timer(env, tx, rec.get(name), "approval expired")
