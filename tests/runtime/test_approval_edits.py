"""Edit-on-approve: the approver changes the call's arguments; they are checked
against the tool's schema and the policy in the decision's transaction, the
task runs with them, and the audit keeps both (redacted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from agentq import (
    ApprovalStatus,
    ApproverNotAllowed,
    FakeClock,
    InvalidArguments,
    Runtime,
    SelfApprovalRefused,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.errors import ApprovalError
from agentq.policies import ApprovalRule, Policy

PAID: list[dict[str, Any]] = []


class RefundArgs(BaseModel):
    order_id: str
    amount: float = Field(gt=0, le=100_000)
    api_token: str = ""
    receipt_url: str = ""


@tool(queue="work")
def refund(ctx: ToolContext, args: RefundArgs) -> dict[str, Any]:
    PAID.append(args.model_dump())
    return {"refunded": args.amount}


POLICY = Policy(
    approvals=(
        ApprovalRule(
            name="huge-refunds", tool="refund", field="amount", above=10_000, approvers=("finance",)
        ),
        ApprovalRule(
            name="big-refunds", tool="refund", field="amount", above=100,
            approvers=("alice", "finance"),
        ),
    ),
    roles={"finance": ("fiona",)},
)


def _open(tmp_path: Path, policy: Policy) -> Runtime:
    PAID.clear()
    return Runtime(
        f"sqlite:///{tmp_path / 'edits.db'}", tools=[refund], policies=policy, clock=FakeClock()
    )


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = _open(tmp_path, POLICY)
    yield runtime
    runtime.close()


def ask(rt: Runtime, amount: float, **extra: Any) -> str:
    task = rt.enqueue_action("refund", {"order_id": "o1", "amount": amount, **extra})
    assert task.status == TaskStatus.AWAITING_APPROVAL
    return task.approval_id or ""


def test_an_approver_lowers_the_amount_and_the_task_runs_with_it(rt: Runtime) -> None:
    approval_id = ask(rt, 900)
    edit = {"order_id": "o1", "amount": 40}
    task = rt.approve(approval_id, by="alice", note="partial", args=edit)
    assert task.args["amount"] == 40 and task.approval_status == "approved"
    rt.worker().drain()
    assert [p["amount"] for p in PAID] == [40]
    approval = rt.approval(approval_id)
    assert approval.args["amount"] == 900 and approval.approved_args == task.args
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED


def test_the_audit_keeps_both_argument_sets_redacted(rt: Runtime) -> None:
    secret = {"api_token": "tok-123", "receipt_url": "https://u:pw@r.example/x?sig=abc"}
    approval_id = ask(rt, 900, **secret)
    rt.approve(approval_id, by="alice", args={"order_id": "o1", "amount": 50, **secret})
    (entry,) = rt.audit_log(target=approval_id)
    assert entry.original_args is not None and entry.edited_args is not None
    assert entry.original_args["amount"] == 900 and entry.edited_args["amount"] == 50
    text = repr(entry.model_dump())
    assert "tok-123" not in text and "pw@" not in text and "sig=abc" not in text
    assert entry.edited_args["api_token"] == "REDACTED"


def test_an_unchanged_approval_audits_no_arguments(rt: Runtime) -> None:
    approval_id = ask(rt, 900)
    rt.approve(approval_id, by="alice", args={"order_id": "o1", "amount": 900})
    (entry,) = rt.audit_log(target=approval_id)
    assert entry.original_args is None and entry.edited_args is None
    assert rt.approval(approval_id).approved_args is None


def test_edited_arguments_that_break_the_schema_decide_nothing(rt: Runtime) -> None:
    approval_id = ask(rt, 900)
    with pytest.raises(InvalidArguments, match="amount"):
        rt.approve(approval_id, by="alice", args={"order_id": "o1", "amount": -5})
    with pytest.raises(InvalidArguments, match="amount: Field required"):
        rt.approve(approval_id, by="alice", args={"order_id": "o1"})
    approval = rt.approval(approval_id)
    assert approval.status == ApprovalStatus.PENDING and rt.audit_log(target=approval_id) == []


def test_a_raised_amount_that_needs_a_higher_approver_is_refused(rt: Runtime) -> None:
    approval_id = ask(rt, 900)
    with pytest.raises(ApproverNotAllowed, match=r"approval rule 'huge-refunds', which 'alice'"):
        rt.approve(approval_id, by="alice", args={"order_id": "o1", "amount": 50_000})
    assert rt.approval(approval_id).status == ApprovalStatus.PENDING
    rt.worker().drain()
    assert PAID == []
    # Someone that rule names may approve it.
    task = rt.approve(approval_id, by="fiona", args={"order_id": "o1", "amount": 50_000})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert [p["amount"] for p in PAID] == [50_000]


def test_only_an_approval_edits_and_only_an_approver_does(rt: Runtime) -> None:
    approval_id = ask(rt, 900)
    with pytest.raises(ApproverNotAllowed, match="'mallory' may not decide"):
        rt.approve(approval_id, by="mallory", args={"order_id": "o1", "amount": 1})
    rt.reject(approval_id, by="alice")
    with pytest.raises(ApprovalError, match="already rejected"):
        rt.approve(approval_id, by="alice", args={"order_id": "o1", "amount": 1})


def test_the_worker_runs_the_edited_call_and_refuses_a_forged_one(rt: Runtime) -> None:
    """The executor checks the task's arguments against what was approved."""
    from agentq.ledger import Tables

    approval_id = ask(rt, 900)
    task = rt.approve(approval_id, by="alice", args={"order_id": "o1", "amount": 60})

    def forge(tx: Any) -> None:
        rec = tx.tx.get_record(Tables.TASKS, task.task_id)
        forged = {**rec, "args": {**rec["args"], "amount": 900}}
        tx.tx.put_record(Tables.TASKS, task.task_id, forged)

    rt.transact(forge)
    rt.worker().drain()
    assert PAID == [] and rt.task(task.task_id).status == TaskStatus.DEAD


def _self_service(upper_approvers: tuple[str, ...]) -> Policy:
    """Issue 40, item 1: above 1000 someone else decides (four eyes, the default);
    above 100 the requester may approve its own call."""
    return Policy(approvals=(
        ApprovalRule(name="large-refunds", tool="refund", field="amount", above=1000,
                     approvers=upper_approvers),
        ApprovalRule(name="small-refunds", tool="refund", field="amount", above=100,
                     self_approval=True),
    ))  # fmt: skip


@pytest.mark.parametrize("upper_approvers", [(), ("cfo",)], ids=["anyone", "cfo-only"])
def test_the_requester_cannot_edit_its_own_call_into_a_four_eyes_rule(
    tmp_path: Path, upper_approvers: tuple[str, ...]
) -> None:
    """The edited call is judged under its own rule too: the requester may approve
    its 500 refund itself, never the 50,000 one it would turn it into, even where
    the upper rule names the requester as its approver."""
    with _open(tmp_path, _self_service(upper_approvers)) as rt:
        asked = rt.enqueue_action("refund", {"order_id": "o1", "amount": 500}, by="cfo")
        approval_id = str(asked.approval_id)
        with pytest.raises(SelfApprovalRefused, match=r"rule 'large-refunds'") as refused:
            rt.approve(approval_id, by="cfo", args={"order_id": "o1", "amount": 50_000})
        assert refused.value.rule == "large-refunds" and "four eyes" in str(refused.value)
        assert rt.approval(approval_id).status == ApprovalStatus.PENDING
        assert rt.audit_log(target=approval_id) == []
        rt.worker().drain()
        assert PAID == []
        # Within the rules that allow it, the requester still approves its own call.
        task = rt.approve(approval_id, by="cfo", args={"order_id": "o1", "amount": 300})
        rt.worker().drain()
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
        assert [p["amount"] for p in PAID] == [300]


def test_someone_else_approves_the_edit_into_a_four_eyes_rule(tmp_path: Path) -> None:
    with _open(tmp_path, _self_service(("cfo",))) as rt:
        asked = rt.enqueue_action("refund", {"order_id": "o1", "amount": 500}, by="bob")
        task = rt.approve(str(asked.approval_id), by="cfo",
                          args={"order_id": "o1", "amount": 50_000})  # fmt: skip
        assert task.args["amount"] == 50_000 and task.approval_status == "approved"


def test_an_edit_down_keeps_the_four_eyes_of_the_rule_it_was_asked_under(
    tmp_path: Path,
) -> None:
    with _open(tmp_path, _self_service(())) as rt:
        asked = rt.enqueue_action("refund", {"order_id": "o1", "amount": 5000}, by="bob")
        with pytest.raises(SelfApprovalRefused, match=r"rule 'large-refunds'"):
            rt.approve(str(asked.approval_id), by="bob", args={"order_id": "o1", "amount": 300})
        assert rt.approval(str(asked.approval_id)).status == ApprovalStatus.PENDING
