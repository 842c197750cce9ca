"""Approval events: request, approve (possibly with edited arguments), reject.

Requesting approval records the approval, the action task (awaiting approval,
no message), the approvers' notification and its timers (the first level's
deadline and reminders, and an overall expiry if the rule has one; what they
do when they fire is :mod:`~agentq.lifecycle.approval_timers`). Every decision
moves the approval and its task together and cancels every timer that became
moot, in one transaction; voiding by a cancel lives with the task events
(:func:`~agentq.lifecycle.tasks.cancel`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agentq import ordering
from agentq.approvals import ApprovalInfo, ApprovalNotice, ApprovalStatus
from agentq.backends import Transaction
from agentq.errors import (
    ApprovalChanged,
    ApprovalError,
    ApprovalNotFound,
    ApproverNotAllowed,
    SelfApprovalRefused,
)
from agentq.ids import new_approval_id
from agentq.ledger import Tables
from agentq.lifecycle import approval_timers, tasks
from agentq.lifecycle.states import Event, next_approval_state
from agentq.policies import format_duration

__all__ = ["EditCheck", "approved_args", "decide", "request", "version"]


@dataclass(frozen=True)
class EditCheck:
    """What the policy says of an approver's edited arguments: the rule that
    applies to them (None: they need no approval), who may approve under it
    (None: anyone) and whether it lets the requester approve its own call."""

    rule: str | None
    members: frozenset[str] | None
    self_approval: bool = False


def request(
    env: tasks.Env,
    tx: Transaction,
    *,
    tool: str,
    queue: str,
    args: dict[str, Any],
    reason: str,
    plan: dict[str, Any],
    expire_after: timedelta | None = None,
    ordering_key: str | None = None,
    idempotency_key: str | None = None,
    run_at: datetime | None = None,
    callback_url: str | None = None,
    created_by: str = tasks.LOCAL,
    fingerprint: str | None = None,
) -> ApprovalInfo:
    """Record a call that waits for a human, with its notification and timers
    (``plan``: :func:`~agentq.lifecycle.approval_timers.plan`); ``created_by``
    asked for it (the four-eyes rule of :func:`decide`)."""
    # Ordered by creation where keys may grow with time (listings page newest first).
    approval_id = new_approval_id(tx.now if env.backend.ordered_keys else None)
    next_approval_state(approval_id, None, Event.REQUEST_APPROVAL)
    task = tasks.create(
        env, tx, tool=tool, queue=queue, args=args, kind="action",
        event=Event.REQUEST_APPROVAL, ordering_key=ordering_key,
        idempotency_key=idempotency_key, approval_id=approval_id, deliver=run_at,
        callback_url=callback_url, created_by=created_by, fingerprint=fingerprint,
    )  # fmt: skip
    rec: dict[str, Any] = {
        "approval_id": approval_id, "task_id": task["task_id"], "tool": tool, "args": args,
        "status": str(ApprovalStatus.PENDING), "reason": reason,
        "requested_at": tasks.iso(tx.now), "run_at": tasks.iso(run_at) if run_at else None,
        "rule": plan.get("rule"), "plan": plan, "created_by": created_by,
    }  # fmt: skip
    rec.update(approval_timers.schedule_level(env, tx, rec, 0))
    notice = ApprovalNotice(
        approval_id=approval_id, tool=tool, args=args, reason=reason, approvers=rec["approvers"],
        deadline=rec["deadline"],
    ).model_dump(mode="json")  # fmt: skip
    if expire_after is not None:
        expiry = tasks.create(
            env, tx, tool=tasks.BUILTIN_EXPIRY, queue=tasks.ESCALATION_QUEUE, args=notice,
            kind="expiry", event=Event.SCHEDULE, approval_id=approval_id,
            deliver=tx.now + expire_after,
        )  # fmt: skip
        rec.update(expiry_task_id=expiry["task_id"], expire_after=format_duration(expire_after))
    notify = plan.get("notify")
    if notify:
        sent = tasks.create(
            env, tx, tool=notify[0], queue=notify[1], args=notice, kind="notify",
            event=Event.ENQUEUE, approval_id=approval_id,
        )  # fmt: skip
        rec["notify_task_id"] = sent["task_id"]
    info = ApprovalInfo.model_validate(rec)
    stored = {**rec, **info.model_dump(mode="json", exclude={"version"})}
    tx.put_record(Tables.APPROVALS, approval_id, stored)
    return info.model_copy(update={"version": version(stored)})


def approved_args(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments an approval approved: the approver's edit, else those asked."""
    edited = rec.get("approved_args")
    return dict(edited if edited is not None else rec["args"])


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
    args: dict[str, Any] | None = None,
    edit: EditCheck | None = None,
) -> dict[str, Any]:
    """A human's approve or reject: the approval, its task and its timers move
    together. Returns the task's new record.

    With ``if_version`` (what the decider saw, from :func:`version`), an approval
    that changed since — escalated, decided, voided — raises
    :class:`~agentq.errors.ApprovalChanged` and nothing is decided. ``by`` must be
    one of the approvers of the approval's level (or an earlier one), if its rule
    names any. An approve with ``args`` (validated by the caller, who says in
    ``edit`` which rule the policy applies to them) runs the call with those,
    approved under both rules it touches: refused if ``by`` may not approve
    under the rule they fall under, or enqueued the call and that rule wants
    four eyes (:func:`_check_edit`)."""
    if event not in (Event.APPROVE, Event.REJECT):
        raise ValueError(f"not a human decision: {event}")
    if not by.strip():
        raise ApprovalError(f"approval {approval_id!r}: say who decides (by=...)")
    if args is not None and event is not Event.APPROVE:
        raise ApprovalError(f"approval {approval_id!r}: only an approval may edit the arguments")
    rec = _approval(tx, approval_id)
    if if_version is not None and version(rec) != if_version:
        raise ApprovalChanged(
            f"approval {approval_id!r} changed since version {if_version!r:.40} was read "
            f"(now {rec['status']}{_detail(rec)}): read it again before deciding"
        )
    status = next_approval_state(approval_id, rec["status"], event, _detail(rec))
    if not approval_timers.may_decide(rec, by):
        raise ApproverNotAllowed(
            f"approval {approval_id!r}: {by!r} may not decide it at level "
            f"{rec.get('level') or 0} of rule {rec.get('rule')!r} "
            f"(approvers: {', '.join(_deciders(rec))})"
        )
    _check_four_eyes(approval_id, rec, by)
    task = tasks.read(tx, rec["task_id"])
    decided = {**rec, "status": status, "decided_at": tasks.iso(tx.now), "decided_by": by,
               "decision_note": note}  # fmt: skip
    if event is Event.APPROVE:
        changes: dict[str, Any] = {"approval_status": str(status)}
        if args is not None and args != task["args"]:
            _check_edit(approval_id, rec, by, edit)
            changes["args"] = args
            decided["approved_args"] = args
        new = tasks.moved(task, Event.APPROVE, tx.now, **changes)
        tasks.store(tx, new)
        key = new.get("ordering_key")
        if not key or ordering.admit(tx, key, new["task_id"]):
            at = new.get("next_attempt_at")
            due = datetime.fromisoformat(at) if at else None
            tasks.send(env, tx, new, due if due is not None and due > tx.now else None)
        if new.get("run"):
            from agentq.lifecycle import runs  # it builds on the task events

            runs.approval_decided(env, tx, new)
    else:
        reason = f"rejected by {by}" + (f": {note}" if note else "")
        new = tasks.finish(env, tx, task, Event.REJECT, error=reason, approval_status=str(status))
    tx.put_record(Tables.APPROVALS, approval_id, decided)
    approval_timers.cancel_all(env, tx, rec, f"approval {status}")
    return new


def _check_four_eyes(approval_id: str, rec: Mapping[str, Any], by: str) -> None:
    """Nobody decides a call it enqueued itself, unless the rule says
    ``self_approval = true``. An enqueuer of ``local`` (a Python caller that named
    nobody, or ``--insecure-local``, where everyone is ``local``) is unknown: there
    is no second pair of eyes to tell apart, so the rule does not apply."""
    if not _is_requester(rec, by) or (rec.get("plan") or {}).get("self_approval"):
        return
    rule = rec.get("rule")
    raise SelfApprovalRefused(
        f"approval {approval_id!r}: {by!r} enqueued this call and may not decide it "
        f"(four eyes; rule {rule!r} does not say self_approval = true)",
        rule=None if rule is None else str(rule),
    )


def _is_requester(rec: Mapping[str, Any], by: str) -> bool:
    """Whether ``by`` enqueued the approval's call (never so for ``local``)."""
    owner = rec.get("created_by")
    return owner not in (None, tasks.LOCAL) and owner == by


def _deciders(rec: Mapping[str, Any]) -> list[str]:
    levels = (rec.get("plan") or {}).get("levels") or []
    names: list[str] = []
    for level in levels[: int(rec.get("level") or 0) + 1]:
        names += [n for n in level["approvers"] if n not in names]
    return names


def _check_edit(approval_id: str, rec: Mapping[str, Any], by: str, edit: EditCheck | None) -> None:
    """An edit is approved under every rule it touches: the one the call was asked
    under (as recorded: :func:`~agentq.lifecycle.approval_timers.may_decide` and
    :func:`_check_four_eyes`) and the one the policy puts the edited arguments
    under. ``by`` must be one of that rule's (first-level) approvers, if it is
    another rule — a lowered amount needs no more than it did, a raised one may
    need someone else — and if ``by`` enqueued the call, that rule must say
    ``self_approval = true`` too: the requester never approves a call that any
    rule it touches gives to four eyes, whoever the rule names."""
    if edit is None:  # fail closed: an edit nobody judged under the policy is refused
        raise ValueError(f"approval {approval_id!r}: edited arguments need their EditCheck")
    if edit.rule is None:
        return
    if edit.rule != rec.get("rule") and edit.members is not None and by not in edit.members:
        raise ApproverNotAllowed(
            f"approval {approval_id!r}: the edited arguments fall under approval rule "
            f"{edit.rule!r}, which {by!r} may not approve (its approvers: "
            f"{', '.join(sorted(edit.members)) or 'none'}); nothing was decided"
        )
    if _is_requester(rec, by) and not edit.self_approval:
        raise SelfApprovalRefused(
            f"approval {approval_id!r}: {by!r} enqueued this call and may not approve it "
            f"with these arguments: they fall under approval rule {edit.rule!r}, which does "
            f"not say self_approval = true (four eyes: someone else must approve them); "
            f"nothing was decided",
            rule=edit.rule,
        )
