"""Edit-on-approve over MCP (the SDK's own client, in process): ``agentq_approve``
with ``args`` runs the edited call; arguments that break the tool's schema, or
that the requester may not approve itself (four eyes), are an error result and
decide nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.surfaces._extras import require

require("mcp", "mcp")

from mcp import Client

from agentq import Runtime, TaskStatus
from agentq.demo_server import DemoAPI
from agentq.mcp.server import build_server
from agentq.server.auth import Principal, Scope
from tests.surfaces.conftest import ROOT, worker_thread

CAROL = Principal("carol", frozenset({Scope.APPROVE, Scope.READ, Scope.ENQUEUE}))
AGENT = Principal("refund-agent", frozenset({Scope.READ, Scope.ENQUEUE}))
CFO = Principal("cfo", frozenset({Scope.APPROVE, Scope.READ, Scope.ENQUEUE}))


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_agentq_approve_with_args_runs_the_edited_call(rt: Runtime, api: DemoAPI) -> None:
    caller = [AGENT]  # the agent asks; carol decides (four eyes: not her own call)
    server = build_server(rt, lambda _ctx: caller[0], wait_seconds=0)

    async def scenario() -> tuple[Any, Any, Any]:
        async with Client(server) as client:
            asked = await client.call_tool("execute_refund", {"order_id": "o9", "amount": 800})
            caller[0] = CAROL
            approval_id = asked.structured_content["approval_id"]
            bad = await client.call_tool(
                "agentq_approve", {"approval_id": approval_id, "args": {"order_id": "o9"}}
            )
            ok = await client.call_tool("agentq_approve", {
                "approval_id": approval_id, "note": "half",
                "args": {"order_id": "o9", "amount": 400},
            })  # fmt: skip
            caller[0] = AGENT
            done = await client.call_tool(
                "agentq_wait_task",
                {"task_id": asked.structured_content["task_id"], "timeout_seconds": 20},
            )
            return bad, ok, done

    with worker_thread(rt):
        bad, ok, done = run(scenario())
    assert bad.is_error and "amount" in bad.content[0].text
    assert not ok.is_error and ok.structured_content["approval_status"] == "approved"
    assert done.structured_content["status"] == TaskStatus.SUCCEEDED.value
    assert done.structured_content["result"]["amount"] == 400
    assert [r["amount"] for r in api.applied()] == [400]


def test_the_requester_cannot_edit_its_own_call_into_a_four_eyes_rule(
    open_rt: Callable[..., Runtime], tmp_path: Path
) -> None:
    """Issue 40, item 1: the refund rule (above 100) lets the requester approve
    its own call; the rules above it do not (four eyes), though the top one
    names the requester as its approver."""
    policies = tmp_path / "policies"
    policies.mkdir()
    text = (ROOT / "policies" / "refunds.toml").read_text()
    (policies / "refunds.toml").write_text(text + "self_approval = true\n")  # its last table
    (policies / "0-upper.toml").write_text(
        '[[approvals]]\nname = "huge-refunds"\ntool = "execute_refund"\nfield = "amount"\n'
        'above = 10000\napprovers = ["cfo"]\n'
        '[[approvals]]\nname = "large-refunds"\ntool = "execute_refund"\nfield = "amount"\n'
        "above = 1000\n"
    )
    rt = open_rt(policies)
    server = build_server(rt, lambda _ctx: CFO, wait_seconds=0)

    async def scenario() -> tuple[str, list[Any], Any]:
        async with Client(server) as client:
            asked = await client.call_tool("execute_refund", {"order_id": "o9", "amount": 500})
            approval_id = asked.structured_content["approval_id"]
            raised = [await client.call_tool("agentq_approve", {
                "approval_id": approval_id, "args": {"order_id": "o9", "amount": amount},
            }) for amount in (5000, 50000)]  # fmt: skip
            own = await client.call_tool("agentq_approve", {
                "approval_id": approval_id, "args": {"order_id": "o9", "amount": 300},
            })  # fmt: skip
            return approval_id, raised, own

    approval_id, raised, own = run(scenario())
    for answer, rule in zip(raised, ("large-refunds", "huge-refunds"), strict=True):
        assert answer.is_error, answer
        assert "four eyes" in answer.content[0].text and f"'{rule}'" in answer.content[0].text
    assert not own.is_error and own.structured_content["approval_status"] == "approved"
    approval = rt.approval(approval_id)
    assert approval.decided_by == "cfo" and approval.approved_args is not None
    assert approval.approved_args["amount"] == 300
