"""Every operator action through the Runtime facade is audited in the ledger, in
the transaction that applies it: who, what, which target, when (issue 12)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, IllegalTransition, PermanentError, Runtime, ToolContext, tool
from agentq.lifecycle.audit import UNNAMED, AuditAction
from agentq.policies import ApprovalRule, Defaults, Policy


class Args(BaseModel):
    ref: str
    amount: float = 0


@tool(queue="work")
def pay(ctx: ToolContext, args: Args) -> dict[str, Any]:
    return {}


@tool(queue="work")
def doomed(ctx: ToolContext, args: Args) -> dict[str, Any]:
    raise PermanentError("no")


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    policy = Policy(
        defaults=Defaults(notify_tool=None, escalation_tool=""),
        approvals=(ApprovalRule(tool="pay", field="amount", above=100),),
    )
    runtime = Runtime(f"sqlite:///{tmp_path / 'a.db'}", tools=[pay, doomed], policies=policy,
                      clock=FakeClock())  # fmt: skip
    yield runtime
    runtime.close()


def test_approve_reject_cancel_replay_and_delete_are_audited_newest_first(rt: Runtime) -> None:
    first = rt.enqueue_action("pay", {"ref": "a", "amount": 500})
    second = rt.enqueue_action("pay", {"ref": "b", "amount": 500})
    queued = rt.enqueue_action("pay", {"ref": "c"})
    assert first.approval_id and second.approval_id
    rt.approve(first.approval_id, by="alice", note="fine")
    rt.reject(second.approval_id, by="bob", note="https://u:pw@x.example/?token=t0k")
    rt.cancel(queued.task_id, "duplicate", by="carol")
    dead = [rt.enqueue_action("doomed", {"ref": r}).task_id for r in ("d1", "d2")]
    rt.worker().drain()
    rt.replay(dead[0], by="dave")
    assert rt.delete_dead_letters([dead[1], "no-such-entry"], by="erin") == [dead[1]]
    log = rt.audit_log()
    assert [(e.actor, e.action, e.target) for e in reversed(log)] == [
        ("alice", AuditAction.APPROVE, first.approval_id),
        ("bob", AuditAction.REJECT, second.approval_id),
        ("carol", AuditAction.CANCEL, queued.task_id),
        ("dave", AuditAction.REPLAY, dead[0]),
        ("erin", AuditAction.DELETE_DEAD_LETTER, dead[1]),
    ]
    assert log[-1].task_id == first.task_id and log[-1].note == "fine"
    assert "pw" not in log[-2].note and "t0k" not in log[-2].note  # notes are redacted
    assert [e.action for e in rt.audit_log(target=first.task_id)] == [AuditAction.APPROVE]
    assert all(e.at == rt.clock.now() for e in log)


def test_a_refused_action_records_nothing(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"ref": "a", "amount": 500})
    assert task.approval_id
    rt.approve(task.approval_id, by="alice")
    with pytest.raises(IllegalTransition):
        rt.reject(task.approval_id, by="mallory")
    with pytest.raises(IllegalTransition):
        rt.replay(task.task_id, by="mallory")
    assert [e.actor for e in rt.audit_log()] == ["alice"]


def test_an_action_without_a_name_is_recorded_as_unnamed(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"ref": "a"})
    rt.cancel(task.task_id)
    [entry] = rt.audit_log()
    assert entry.actor == UNNAMED
