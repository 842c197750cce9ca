"""An approval's timers: its levels' deadlines, reminders, escalations and outcomes.

When an approval is requested, its rule's plan is recorded with it (who may
decide at each level, each level's timeout, the reminders, what the last
deadline does), so the approval follows the rule it was asked under. Each
level gets a deadline timer and reminder timers, all scheduled messages
(:func:`schedule_level`). When the deadline fires (:func:`fired`, inside the
timer's completion transaction) the approval escalates to the next level — its
other timers are cancelled and the next level's are scheduled, in that same
transaction — or, at the last level, the rule's ``on_timeout`` applies:
``escalate`` (it waits), ``reject`` (``auto_rejected``) or ``expire``
(``expired``). A decision cancels every pending timer in its own transaction
(:func:`cancel_all`), and a timer the approval no longer names does nothing: a
stale one cannot move it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agentq.approvals import ApprovalNotice, ApprovalStatus
from agentq.backends import Transaction
from agentq.envelope import TaskKind
from agentq.ledger import Tables, TaskStatus
from agentq.lifecycle import tasks
from agentq.lifecycle.states import Event, next_approval_state
from agentq.policies import ApprovalRule, Policy

__all__ = ["OPEN", "Route", "cancel_all", "fired", "may_decide", "plan", "schedule_level"]

log = logging.getLogger("agentq.approvals")

#: Approval states that can still be decided (and whose timers still run).
OPEN = frozenset({ApprovalStatus.PENDING, ApprovalStatus.ESCALATED})

#: (tool, queue) of a timer's task.
Route = tuple[str, str]


def plan(
    policy: Policy,
    rule: ApprovalRule | None,
    *,
    escalate_after: timedelta,
    escalation: Route | None,
    notify: Route | None,
) -> dict[str, Any]:
    """The plan an approval is recorded with (JSON): its rule's levels, each with
    who may decide (names or roles, and the people they name now) and how long it
    waits (None: no deadline), the reminders, and what the last deadline does."""
    on_timeout = rule.on_timeout if rule else "escalate"
    first = list(rule.approvers) if rule else []
    levels = [{"approvers": first, "after": escalate_after.total_seconds()}]
    for step in rule.escalate_to if rule else ():
        after = step.after or escalate_after
        levels.append({"approvers": list(step.approvers), "after": after.total_seconds()})
    if on_timeout == "escalate":
        if len(levels) == 1:
            # The classic escalation: one, to whoever the escalation tool tells,
            # the same people still deciding.
            levels.append({"approvers": first, "after": None})
        else:
            levels[-1]["after"] = None  # the top of the chain waits for a decision
    for level in levels:
        named: list[str] = level["approvers"]  # type: ignore[assignment]
        level["members"] = sorted(policy.members(tuple(named)))
    return {
        "rule": policy.rule_label(rule) if rule else None,
        "levels": levels,
        "on_timeout": on_timeout,
        "remind": [r.total_seconds() for r in (rule.remind if rule else ())],
        "escalation": list(escalation or (tasks.BUILTIN_ESCALATION, tasks.ESCALATION_QUEUE)),
        "notify": list(notify) if notify else None,
        "self_approval": bool(rule.self_approval) if rule else False,
    }


def may_decide(rec: Mapping[str, Any], by: str) -> bool:
    """Whether ``by`` may decide the approval at its current level: anyone if its
    first level names nobody, else the people named by this level or an earlier one."""
    levels = (rec.get("plan") or {}).get("levels") or []
    if not levels or not levels[0]["approvers"]:
        return True
    upto = levels[: int(rec.get("level") or 0) + 1]
    return any(by in level["members"] for level in upto)


def _notice(rec: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    notice = ApprovalNotice(
        approval_id=rec["approval_id"], tool=rec["tool"], args=rec["args"],
        reason=rec.get("reason") or "", **extra,
    )  # fmt: skip
    return notice.model_dump(mode="json")


def _timer(
    env: tasks.Env, tx: Transaction, rec: Mapping[str, Any], route: Route, kind: TaskKind,
    at: datetime, args: dict[str, Any],
) -> str:  # fmt: skip
    timer = tasks.create(
        env, tx, tool=route[0], queue=route[1], args=args, kind=kind, event=Event.SCHEDULE,
        approval_id=rec["approval_id"], deliver=at,
    )  # fmt: skip
    return str(timer["task_id"])


def schedule_level(
    env: tasks.Env, tx: Transaction, rec: Mapping[str, Any], level: int
) -> dict[str, Any]:
    """The record's fields for ``level``, starting now: its approvers, and its
    deadline timer and reminders (created here), if the level has a deadline."""
    p = rec["plan"]
    levels = p["levels"]
    here = levels[level]
    fields: dict[str, Any] = {
        "level": level, "approvers": here["approvers"], "deadline": None, "on_deadline": None,
        "deadline_task_id": None, "reminder_task_ids": [],
    }  # fmt: skip
    if here["after"] is None:
        return fields
    deadline = tx.now + timedelta(seconds=here["after"])
    if level + 1 < len(levels):
        action = "escalate"
        after = levels[level + 1]
        route: Route = (p["escalation"][0], p["escalation"][1])
        args = _notice(rec, event="escalation", level=level + 1, approvers=after["approvers"])
        kind: TaskKind = "escalation"
    else:
        action = p["on_timeout"]
        route = (tasks.BUILTIN_EXPIRY if action == "expire" else tasks.BUILTIN_AUTO_REJECT,
                 tasks.ESCALATION_QUEUE)  # fmt: skip
        args = _notice(rec, level=level, approvers=here["approvers"], deadline=tasks.iso(deadline))
        kind = "expiry" if action == "expire" else "auto_reject"
    deadline_id = _timer(env, tx, rec, route, kind, deadline, args)
    fields.update(deadline=tasks.iso(deadline), on_deadline=action, deadline_task_id=deadline_id)
    if action == "escalate":
        fields.update(escalate_at=tasks.iso(deadline), escalation_task_id=deadline_id)
    notify = p.get("notify")
    remind_route: Route = (
        (notify[0], notify[1]) if notify else (tasks.BUILTIN_REMINDER, tasks.ESCALATION_QUEUE)
    )
    reminder = _notice(rec, event="reminder", level=level, approvers=here["approvers"],
                       deadline=tasks.iso(deadline))  # fmt: skip
    for before in p.get("remind") or ():
        at = deadline - timedelta(seconds=before)
        if at > tx.now:  # a reminder whose time has passed would only be noise
            fields["reminder_task_ids"].append(
                _timer(env, tx, rec, remind_route, "reminder", at, reminder)
            )
    return fields


def cancel_all(
    env: tasks.Env, tx: Transaction, rec: Mapping[str, Any], reason: str, *,
    keep: frozenset[str] = frozenset(),
) -> None:  # fmt: skip
    """Cancel every pending timer of the approval (but those in ``keep``)."""
    for timer in tasks.approval_timer_ids(rec):
        if timer not in keep:
            tasks.cancel_timer(env, tx, timer, reason)


def fired(env: tasks.Env, tx: Transaction, timer: dict[str, Any]) -> None:
    """An approval's timer ran (inside its completion transaction): a reminder,
    an escalation to the next level, or the deadline's outcome.

    A timer does something only if its approval is still open and still names
    it: a decision (or an escalation) that raced it has cancelled it, so this
    completion's strict ack fails first; and should a stale timer still get here,
    it changes nothing."""
    approval_id = str(timer.get("approval_id") or "")
    rec = tx.get_record(Tables.APPROVALS, approval_id) if approval_id else None
    if rec is None or rec["status"] not in OPEN:
        return
    if timer["task_id"] not in tasks.approval_timer_ids(rec):
        return
    kind = timer.get("kind")
    if kind == "reminder":
        log.info("approval %s: reminder sent; deadline %s", approval_id, rec.get("deadline"))
    elif kind == "escalation":
        _escalate(env, tx, rec)
    elif kind == "expiry":
        _time_out(env, tx, rec, Event.EXPIRE, str(timer["task_id"]))
    elif kind == "auto_reject":
        _time_out(env, tx, rec, Event.AUTO_REJECT, str(timer["task_id"]))


def _escalate(env: tasks.Env, tx: Transaction, rec: dict[str, Any]) -> None:
    approval_id = str(rec["approval_id"])
    status = next_approval_state(approval_id, rec["status"], Event.ESCALATE)
    new = {**rec, "status": status, "escalated_at": tasks.iso(tx.now)}
    levels = (rec.get("plan") or {}).get("levels")
    if levels:  # recorded with a plan: go to the next level, with its own timers
        level = min(int(rec.get("level") or 0) + 1, len(levels) - 1)
        for old in rec.get("reminder_task_ids") or ():
            tasks.cancel_timer(env, tx, old, f"approval escalated to level {level}")
        new.update(schedule_level(env, tx, new, level))
    tx.put_record(Tables.APPROVALS, approval_id, new)


def _time_out(
    env: tasks.Env, tx: Transaction, rec: dict[str, Any], event: Event, timer_id: str
) -> None:
    approval_id = str(rec["approval_id"])
    status = next_approval_state(approval_id, rec["status"], event)
    rule = (rec.get("plan") or {}).get("rule")
    whose = f"rule {rule!r}" if rule else "its rule"
    if timer_id == rec.get("expiry_task_id") and rec.get("expire_after"):
        when = f"within {rec['expire_after']} of the request"
    else:
        when = f"by the deadline of level {rec.get('level') or 0}"
    if event is Event.EXPIRE:
        reason = (f"approval expired: nobody decided {when} and {whose} lets it lapse; "
                  "the call never ran (ask again if it is still needed)")  # fmt: skip
    else:
        reason = (f"approval auto_rejected: nobody decided {when} and {whose} rejects "
                  "undecided calls; the call never ran")  # fmt: skip
    tx.put_record(
        Tables.APPROVALS, approval_id,
        {**rec, "status": status, "decided_at": tasks.iso(tx.now), "decision_note": reason},
    )  # fmt: skip
    task = tasks.read(tx, rec["task_id"])
    if task["status"] == TaskStatus.AWAITING_APPROVAL:
        tasks.finish(env, tx, task, event, error=reason, approval_status=str(status))
    cancel_all(env, tx, rec, f"approval {status}", keep=frozenset({timer_id}))
