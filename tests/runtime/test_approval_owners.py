"""Owners of tasks, approvals and idempotency keys in the Python API (issue 27),
on every backend: recorded in the records' JSON, so no schema change."""

from __future__ import annotations

import pytest

from agentq import IdempotencyConflict, Runtime
from agentq.ledger import Tables

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
