"""Approval timers: reminders, escalation through levels, a deadline that
rejects, and an approver who edits the call before approving it.

Every timer is a scheduled message; the decision that makes one moot deletes
it in its own transaction. A fake clock makes the days pass at once.
"""

# expect: reminders sent before the first deadline: 2
# expect: escalated to level 1: team-lead (new deadline in 24h)
# expect: unanswered at the last level: auto_rejected
# expect: refused: the edited amount falls under 'huge-refunds'
# expect: approved with an edit: refunded 40.0 (asked 450.0)
# expect: reminders or escalations after the approval: 0

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from agentq import ApproverNotAllowed, FakeClock, Runtime
from agentq.policies import ApprovalRule, EscalationLevel, load_policies
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]
DAY = timedelta(days=1)

RULES = (
    ApprovalRule(name="huge-refunds", tool="execute_refund", field="amount", above=10_000,
                 approvers=("finance",)),
    ApprovalRule(
        name="big-refunds", tool="execute_refund", field="amount", above=100,
        approvers=("alice",),                 # level 0
        escalate_after=timedelta(hours=48),   # its deadline
        remind=(DAY, timedelta(hours=1)),     # before each deadline
        escalate_to=(EscalationLevel(approvers=("team-lead",), after=DAY),),
        on_timeout="reject",                  # at the last level's deadline
    ),
)  # fmt: skip


def main() -> None:
    clock = FakeClock()
    policy = load_policies(ROOT / "policies").model_copy(
        update={"approvals": RULES, "roles": {"team-lead": ("tom",), "finance": ("fay",)}}
    )
    with LoopbackAPI() as api:
        urls = {"payments_url": api.url, "notifications_url": api.url}
        rt = Runtime("sqlite:///:memory:", tools=ROOT / "tools", policies=policy, clock=clock,
                     settings=urls)  # fmt: skip
        worker = rt.worker()

        forgotten = rt.enqueue_action("execute_refund", {"order_id": "A-1", "amount": 450})
        clock.advance(timedelta(hours=47))  # both reminders are due, not the deadline
        worker.drain()
        print("reminders sent before the first deadline:", api.requests("/notifications") - 1)
        clock.advance(timedelta(hours=1))
        worker.drain()
        one = rt.approval(forgotten.approval_id or "")
        hours = (one.deadline - clock.now()) // timedelta(hours=1) if one.deadline else None
        print(f"escalated to level {one.level}: {', '.join(one.approvers)} "
              f"(new deadline in {hours}h)")  # fmt: skip
        clock.advance(DAY)
        worker.drain()
        print("unanswered at the last level:", rt.approval(one.approval_id).status)

        asked = rt.enqueue_action("execute_refund", {"order_id": "A-2", "amount": 450})
        approval_id = asked.approval_id or ""
        try:  # alice may approve big refunds, not huge ones
            rt.approve(approval_id, by="alice", args={"order_id": "A-2", "amount": 20_000})
        except ApproverNotAllowed as exc:
            rule = str(exc).split("rule ")[1].split(",")[0]
            print("refused: the edited amount falls under", rule)
        worker.drain()  # its request notice
        rt.approve(approval_id, by="alice", note="partial refund",
                   args={"order_id": "A-2", "amount": 40})  # fmt: skip
        told = api.requests("/notifications") + api.requests("/escalations")
        clock.advance(30 * DAY)  # far past every deadline it had
        worker.drain()
        done = rt.task(asked.task_id)
        print(f"approved with an edit: refunded {done.result['amount']} "
              f"(asked {rt.approval(approval_id).args['amount']})")  # fmt: skip
        later = api.requests("/notifications") + api.requests("/escalations") - told
        print("reminders or escalations after the approval:", later)
        rt.close()


if __name__ == "__main__":
    main()
