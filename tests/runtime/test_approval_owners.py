"""Owners of tasks, approvals and idempotency keys in the Python API (issue 27),
on every backend: recorded in the records' JSON, so no schema change."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq import FakeClock, IdempotencyConflict, Runtime, SelfApprovalRefused
from agentq.demo_server import DemoAPI
from agentq.ledger import Tables
from tests.runtime.conftest import ROOT, settings_for

BIG = {"order_id": "o1", "amount": 500}  # above 100: needs a human


def test_a_task_its_approval_and_its_key_record_who_enqueued_them(rt: Runtime) -> None:
    task = rt.enqueue_action("execute_refund", BIG, idempotency_key="k1", by="bot")
    assert task.created_by == "bot" and rt.task(task.task_id).created_by == "bot"
    assert task.approval_id is not None
    approval = rt.approval(task.approval_id)
    assert approval.created_by == "bot"
    assert rt.backend.get_record(Tables.IDEMPOTENCY, "k1")["created_by"] == "bot"  # type: ignore[index]
    # The approval's timers and notice are the runtime's own.
    assert rt.task(str(approval.escalation_task_id)).created_by == "agentq"
    assert rt.enqueue_action("execute_refund", {"order_id": "o2", "amount": 3}).created_by == (
        "local"
    )


def test_another_principal_cannot_claim_a_key(rt: Runtime) -> None:
    first = rt.enqueue_action("execute_refund", BIG, idempotency_key="k2", by="bot")
    again = rt.enqueue_action("execute_refund", BIG, idempotency_key="k2", by="bot")
    assert again.task_id == first.task_id
    with pytest.raises(IdempotencyConflict, match="another principal"):
        rt.enqueue_action("execute_refund", BIG, idempotency_key="k2", by="mallory")


def _runtime(
    tmp_path: Path, clock: FakeClock, api: DemoAPI, self_approval: bool, extra: str = ""
) -> Runtime:
    policies = tmp_path / "policies"
    policies.mkdir()
    text = (ROOT / "policies" / "refunds.toml").read_text()
    if self_approval:
        text += "self_approval = true\n"  # the last table is the approval rule
        assert text.rstrip().endswith("self_approval = true")
    text += extra
    (policies / "refunds.toml").write_text(text)
    return Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=ROOT / "tools",
                   policies=policies, clock=clock, settings=settings_for(api))  # fmt: skip


def test_four_eyes_in_the_python_api(tmp_path: Path, clock: FakeClock, api: DemoAPI) -> None:
    with _runtime(tmp_path, clock, api, self_approval=False) as rt:
        asked = rt.enqueue_action("execute_refund", BIG, by="bob")
        with pytest.raises(SelfApprovalRefused, match="four eyes") as refused:
            rt.approve(str(asked.approval_id), by="bob")
        assert refused.value.rule == "approvals[0]"
        with pytest.raises(SelfApprovalRefused):
            rt.reject(str(asked.approval_id), by="bob")
        assert rt.approval(str(asked.approval_id)).status == "pending"
        # "local" is nobody in particular: a local call may be decided by anyone,
        # "local" included, and "local" may decide a named principal's call.
        local = rt.enqueue_action("execute_refund", {"order_id": "o3", "amount": 600})
        assert rt.approve(str(local.approval_id), by="local").status == "queued"
        assert rt.approve(str(asked.approval_id), by="local").status == "queued"


def test_a_rule_may_allow_self_approval(tmp_path: Path, clock: FakeClock, api: DemoAPI) -> None:
    with _runtime(tmp_path, clock, api, self_approval=True) as rt:
        asked = rt.enqueue_action("execute_refund", BIG, by="bob")
        assert rt.approve(str(asked.approval_id), by="bob").status == "queued"


def test_an_approver_may_read_only_what_its_rule_lets_it_decide(
    tmp_path: Path, clock: FakeClock, api: DemoAPI
) -> None:
    rule = 'approvers = ["alice"]\n'
    with _runtime(tmp_path, clock, api, self_approval=False, extra=rule) as rt:
        asked = rt.enqueue_action("execute_refund", BIG, by="bot")
        approvals = rt.approvals()
        assert rt.decidable_by("alice", approvals) == {asked.approval_id}
        assert rt.decidable_by("carol", approvals) == set()


def test_a_key_covers_the_calls_options_not_only_its_arguments(rt: Runtime) -> None:
    from datetime import timedelta

    small = {"order_id": "o5", "amount": 5}
    first = rt.enqueue_action("execute_refund", small, idempotency_key="k3", delay=60)
    assert rt.enqueue_action("execute_refund", small, idempotency_key="k3", delay=60).task_id == (
        first.task_id
    )
    others: list[dict[str, object]] = [
        {"delay": 61}, {"delay": timedelta(seconds=60), "ordering_key": "o"},
        {"delay": 60, "reason": "why not"}, {},
    ]  # fmt: skip
    for options in others:
        with pytest.raises(IdempotencyConflict, match="arguments or options"):
            rt.enqueue_action("execute_refund", small, idempotency_key="k3", **options)  # type: ignore[arg-type]
