"""``agentq approvals`` shows what an approver and an auditor need (issue 39,
2.12): who decided a decided approval (``--status all`` had no "decided by"
column)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.cli import main
from agentq.policies import ApprovalRule, Policy


class PayArgs(BaseModel):
    order_id: str
    amount: float


@tool(queue="work")
def pay(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    return {}


POLICY = Policy(approvals=(ApprovalRule(tool="pay", field="amount", above=100),))


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'agentq.db'}"
    with Runtime(url, tools=[pay], policies=POLICY, clock=FakeClock()) as rt:
        decided = rt.enqueue_action("pay", {"order_id": "o-1", "amount": 500})
        rt.enqueue_action("pay", {"order_id": "o-2", "amount": 700})
        assert decided.approval_id is not None
        rt.approve(decided.approval_id, by="fiona")
    return url


def _table(capsys: pytest.CaptureFixture[str], *argv: str) -> list[list[str]]:
    assert main(["approvals", *argv]) == 0
    return [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_a_listing_with_decided_approvals_says_who_decided(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    header, *rows = _table(capsys, "--db", db, "--status", "all")
    assert "decided_by" in header, header
    column = header.index("decided_by")
    assert sorted(row[column] for row in rows) == ["-", "fiona"], rows
    header, *_ = _table(capsys, "--db", db, "--status", "approved")
    assert "decided_by" in header
