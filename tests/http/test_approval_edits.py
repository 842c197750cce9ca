"""Edit-on-approve over the HTTP API, on a real server over loopback: the body's
``args`` is checked against the tool's schema and the policy; a principal that
the edited call's approval rule does not name is refused (403), and so is the
requester editing its own call into a rule that wants four eyes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from agentq import Runtime
from tests.http.conftest import LiveServer, write_policies

BIG = {"args": {"order_id": "o2", "amount": 500}}


@pytest.fixture
def policies_dir(tmp_path: Path) -> Path:
    """The refund bot's policies, whose rule (above 100) lets the requester approve
    its own call, with rules before it (files are read in name order): refunds
    above 10,000 need the finance lead or ``ops`` (the admin token's principal),
    those above 1,000 anyone but the requester (four eyes, the default)."""
    directory = write_policies(tmp_path / "policies")
    refunds = directory / "refunds.toml"
    text = refunds.read_text()
    assert text.count("\nabove = 100\n") == 1
    refunds.write_text(text.replace("\nabove = 100\n", "\nabove = 100\nself_approval = true\n"))
    (directory / "0-huge.toml").write_text(
        '[[approvals]]\nname = "huge-refunds"\ntool = "execute_refund"\nfield = "amount"\n'
        'above = 10000\napprovers = ["finance-lead", "ops"]\n'
        '[[approvals]]\nname = "large-refunds"\ntool = "execute_refund"\nfield = "amount"\n'
        "above = 1000\n"
    )
    return directory


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    return body


def _ask(agent: httpx.Client, alice: httpx.Client) -> tuple[str, str]:
    task = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
    approval_id = task["approval_id"]
    etag = alice.get(f"/v1/approvals/{approval_id}").headers["etag"]
    return approval_id, etag


def test_an_approver_edits_the_amount_over_http(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as agent, server.client("alice-token") as alice:
        approval_id, etag = _ask(agent, alice)
        url = f"/v1/approvals/{approval_id}:approve"
        bad = alice.post(url, json={"args": {"order_id": "o2", "amount": -1}},
                         headers={"If-Match": etag})  # fmt: skip
        assert "amount" in _problem(bad, 422)["detail"]
        on_reject = alice.post(f"/v1/approvals/{approval_id}:reject",
                               json={"args": {"order_id": "o2", "amount": 1}},
                               headers={"If-Match": etag})  # fmt: skip
        assert _problem(on_reject, 422)["errors"][0]["pointer"] == "/args"
        ok = alice.post(url, json={"note": "partial", "args": {"order_id": "o2", "amount": 45}},
                        headers={"If-Match": etag})  # fmt: skip
    assert ok.status_code == 200, ok.text
    assert ok.json()["args"]["amount"] == 45 and ok.json()["approval_status"] == "approved"
    approval = runtime.approval(approval_id)
    assert approval.args["amount"] == 500 and approval.approved_args is not None
    assert approval.approved_args["amount"] == 45 and approval.decided_by == "alice"
    (entry,) = runtime.audit_log(target=approval_id)
    assert entry.actor == "alice" and entry.edited_args == approval.approved_args


def test_an_edit_that_needs_a_higher_approver_is_403(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as agent, server.client("alice-token") as alice:
        approval_id, etag = _ask(agent, alice)
        raised = alice.post(f"/v1/approvals/{approval_id}:approve",
                            json={"args": {"order_id": "o2", "amount": 50000}},
                            headers={"If-Match": etag})  # fmt: skip
    problem = _problem(raised, 403)
    assert "'huge-refunds'" in problem["detail"] and "'alice' may not approve" in problem["detail"]
    assert runtime.approval(approval_id).status == "pending"


def test_the_requester_cannot_edit_its_own_call_into_a_four_eyes_rule(
    server: LiveServer, runtime: Runtime
) -> None:
    """Issue 40, item 1: ``ops`` may approve its own 500 refund, not the 5,000 or
    50,000 one it would edit it into, though ``huge-refunds`` names it."""
    from agentq.server.problems import SELF_APPROVAL_TYPE

    with server.client("admin-token") as ops:
        approval_id, etag = _ask(ops, ops)
        url = f"/v1/approvals/{approval_id}:approve"
        for amount, rule in ((5000, "large-refunds"), (50000, "huge-refunds")):
            raised = ops.post(url, json={"args": {"order_id": "o2", "amount": amount}},
                              headers={"If-Match": etag})  # fmt: skip
            problem = _problem(raised, 403)
            assert problem["type"] == SELF_APPROVAL_TYPE and problem["rule"] == rule
            assert "four eyes" in problem["detail"] and f"'{rule}'" in problem["detail"]
        assert runtime.approval(approval_id).status == "pending"
        assert runtime.audit_log(target=approval_id) == []
        ok = ops.post(url, json={"args": {"order_id": "o2", "amount": 300}},
                      headers={"If-Match": etag})  # fmt: skip
    assert ok.status_code == 200, ok.text
    assert ok.json()["args"]["amount"] == 300 and runtime.approval(approval_id).decided_by == "ops"
