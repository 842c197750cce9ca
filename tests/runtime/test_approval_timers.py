"""Approval timers on the fake clock: reminders, multi-level escalation, the
outcome of the last deadline (escalate, reject, expire), who may decide at each
level, and that a decision deletes every pending timer in its transaction."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    ApprovalNotice,
    ApprovalStatus,
    ApproverNotAllowed,
    FakeClock,
    Runtime,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.lifecycle import approval_timers
from agentq.policies import ApprovalRule, Defaults, EscalationLevel, Policy

NOTICES: list[tuple[str, dict[str, Any]]] = []
PAID: list[float] = []


class PayArgs(BaseModel):
    ref: str
    amount: float


@tool(queue="work")
def pay(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    PAID.append(args.amount)
    return {"paid": args.amount}


@tool(queue="notices")
def tell(ctx: ToolContext, args: ApprovalNotice) -> dict[str, Any]:
    NOTICES.append(("tell", args.model_dump(mode="json")))
    return {}


@tool(queue="notices")
def page(ctx: ToolContext, args: ApprovalNotice) -> dict[str, Any]:
    NOTICES.append(("page", args.model_dump(mode="json")))
    return {}


def runtime(tmp_path: Path, clock: FakeClock, *rules: ApprovalRule) -> Runtime:
    NOTICES.clear()
    PAID.clear()
    policy = Policy(
        defaults=Defaults(notify_tool="tell", escalation_tool="page"),
        approvals=rules,
        roles={"team-lead": ("tina",), "finance-director": ("fiona", "frank")},
    )
    return Runtime(
        f"sqlite:///{tmp_path / 'timers.db'}", tools=[pay, tell, page], policies=policy,
        clock=clock,
    )  # fmt: skip


def events(kind: str) -> list[dict[str, Any]]:
    return [n for t, n in NOTICES if n["event"] == kind]


HOUR = timedelta(hours=1)

LEVELS = ApprovalRule(
    name="big-refunds", tool="pay", field="amount", above=100, approvers=("alice",),
    escalate_after=timedelta(hours=72), remind=(timedelta(hours=24), HOUR),
    escalate_to=(EscalationLevel(approvers=("team-lead",), after=timedelta(hours=24)),
                 EscalationLevel(approvers=("finance-director",), after=timedelta(hours=48))),
    on_timeout="reject",
)  # fmt: skip


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    runtime_ = runtime(tmp_path, clock, LEVELS)
    yield runtime_
    runtime_.close()


def test_reminders_come_before_the_deadline_and_not_before_their_time(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval = rt.approval(task.approval_id or "")
    assert approval.deadline == clock.now() + timedelta(hours=72)
    assert approval.on_deadline == "escalate" and len(approval.reminder_task_ids) == 2
    rt.worker().drain()
    assert [n["event"] for _, n in NOTICES] == ["requested"]
    clock.advance(timedelta(hours=48) - timedelta(seconds=1))
    rt.worker().drain()
    assert events("reminder") == []
    clock.advance(timedelta(seconds=1))  # 24 h before the deadline
    rt.worker().drain()
    (first,) = events("reminder")
    assert approval.deadline is not None
    assert first["deadline"][:19] == approval.deadline.isoformat()[:19]
    assert first["approvers"] == ["alice"] and first["level"] == 0
    clock.advance(timedelta(hours=23))  # 1 h before
    rt.worker().drain()
    assert len(events("reminder")) == 2 and events("escalation") == []
    assert rt.approval(approval.approval_id).status == ApprovalStatus.PENDING


def test_an_approval_between_reminder_and_deadline_deletes_every_later_timer(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval = rt.approval(task.approval_id or "")
    clock.advance(timedelta(hours=50))  # after the 24 h reminder, before the 1 h one
    rt.worker().drain()
    assert len(events("reminder")) == 1
    rt.approve(approval.approval_id, by="alice")
    later = [approval.reminder_task_ids[1], approval.deadline_task_id or ""]
    assert [rt.task(t).status for t in later] == [TaskStatus.CANCELLED] * 2
    for _ in range(4):  # far past every deadline a level could have had
        clock.advance(timedelta(days=30))
        rt.worker().drain()
    assert len(events("reminder")) == 1 and events("escalation") == []
    assert PAID == [500]
    decided = rt.approval(approval.approval_id)
    assert decided.status == ApprovalStatus.APPROVED and decided.level == 0


def test_each_level_has_its_approvers_deadline_and_reminders_then_the_rule_rejects(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval_id = task.approval_id or ""
    clock.advance(timedelta(hours=72))
    rt.worker().drain()  # the request notice, both reminders, then the escalation
    one = rt.approval(approval_id)
    assert one.status == ApprovalStatus.ESCALATED and one.level == 1
    assert one.approvers == ["team-lead"]
    assert one.deadline == clock.now() + timedelta(hours=24)  # a full level from now
    # 24 h before a 24 h deadline is now: that reminder would only be noise.
    assert len(one.reminder_task_ids) == 1 and one.escalated_at == clock.now()
    (escalated,) = events("escalation")
    assert escalated["level"] == 1 and escalated["approvers"] == ["team-lead"]
    clock.advance(timedelta(hours=23))
    rt.worker().drain()
    assert [n["level"] for n in events("reminder")] == [0, 0, 1]
    clock.advance(HOUR)
    rt.worker().drain()
    two = rt.approval(approval_id)
    assert two.level == 2 and two.approvers == ["finance-director"]
    assert two.on_deadline == "reject" and two.escalation_task_id == one.deadline_task_id
    for step in (24, 23, 1):  # its two reminders, then its deadline
        clock.advance(timedelta(hours=step))
        rt.worker().drain()
    done = rt.approval(approval_id)
    assert done.status == ApprovalStatus.AUTO_REJECTED and done.decided_by is None
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.CANCELLED
    assert info.approval_status == "auto_rejected"
    assert "auto_rejected" in (info.error or "") and "'big-refunds'" in (info.error or "")
    assert "rejects undecided calls" in (done.decision_note or "")
    assert PAID == []
    assert len(events("reminder")) == 5


def test_expire_and_reject_on_timeout_end_in_distinct_statuses(
    tmp_path: Path, clock: FakeClock
) -> None:
    outcomes = {}
    for on_timeout in ("expire", "reject", "escalate"):
        rule = ApprovalRule(tool="pay", escalate_after=timedelta(hours=10), on_timeout=on_timeout)
        (tmp_path / on_timeout).mkdir()
        rt = runtime(tmp_path / on_timeout, clock, rule)
        task = rt.enqueue_action("pay", {"ref": "r", "amount": 5})
        clock.advance(timedelta(hours=10))
        rt.worker().drain()
        clock.advance(timedelta(days=30))
        rt.worker().drain()
        info = rt.task(task.task_id)
        outcomes[on_timeout] = (rt.approval(task.approval_id or "").status, info.status)
        if on_timeout == "expire":
            assert "approval expired" in (info.error or "") and "ask again" in (info.error or "")
        rt.close()
    assert outcomes == {
        "expire": (ApprovalStatus.EXPIRED, TaskStatus.CANCELLED),
        "reject": (ApprovalStatus.AUTO_REJECTED, TaskStatus.CANCELLED),
        "escalate": (ApprovalStatus.ESCALATED, TaskStatus.AWAITING_APPROVAL),
    }


def test_who_may_decide_widens_with_each_level(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval_id = task.approval_id or ""
    with pytest.raises(ApproverNotAllowed, match=r"'tina' may not decide it at level 0"):
        rt.approve(approval_id, by="tina")
    with pytest.raises(ApproverNotAllowed, match="approvers: alice"):
        rt.reject(approval_id, by="team-lead")  # a role's name is nobody
    assert rt.approval(approval_id).status == ApprovalStatus.PENDING
    for hours in (72, 24):  # level 0's deadline, then level 1's
        clock.advance(timedelta(hours=hours))
        rt.worker().drain()
    assert rt.approval(approval_id).level == 2
    with pytest.raises(ApproverNotAllowed):
        rt.approve(approval_id, by="mallory")
    rt.approve(approval_id, by="frank")  # a member of finance-director
    rt.worker().drain()
    assert PAID == [500]


def test_a_timer_that_fires_after_the_decision_changes_nothing(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval = rt.approval(task.approval_id or "")
    rt.approve(approval.approval_id, by="alice")
    decided = rt.approval(approval.approval_id)
    # The deadline timer as a worker that claimed it before the approval holds it:
    # its completion would run this; the approval is no longer open, so nothing moves.
    stale = rt.task(approval.deadline_task_id or "").model_dump(mode="json")
    rt.transact(lambda tx: approval_timers.fired(rt, tx.tx, stale))
    assert rt.approval(approval.approval_id) == decided


def test_a_timer_the_approval_no_longer_names_changes_nothing(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    first = rt.approval(task.approval_id or "")
    clock.advance(timedelta(hours=72))
    rt.worker().drain()
    escalated = rt.approval(first.approval_id)
    assert escalated.level == 1
    # Level 0's deadline again (a duplicate delivery that got this far): not the
    # approval's current timer, so it does not escalate a second time.
    old = rt.task(first.deadline_task_id or "").model_dump(mode="json")
    old["task_id"] = first.reminder_task_ids[0]
    rt.transact(lambda tx: approval_timers.fired(rt, tx.tx, old))
    assert rt.approval(first.approval_id) == escalated


def test_a_late_worker_gives_the_next_level_its_full_time(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    clock.advance(timedelta(days=20))  # every worker was down
    rt.worker().drain()
    approval = rt.approval(task.approval_id or "")
    assert approval.level == 1 and approval.status == ApprovalStatus.ESCALATED
    assert approval.deadline == clock.now() + timedelta(hours=24)
    assert len(events("escalation")) == 1


def test_a_cancel_deletes_the_reminders_too(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval = rt.approval(task.approval_id or "")
    rt.cancel(task.task_id, by="agent")
    timers = [*approval.reminder_task_ids, approval.deadline_task_id or ""]
    assert {rt.task(t).status for t in timers} == {TaskStatus.CANCELLED}
    clock.advance(timedelta(days=30))
    rt.worker().drain()
    assert events("reminder") == [] and events("escalation") == []
    assert rt.approval(approval.approval_id).status == ApprovalStatus.VOID
