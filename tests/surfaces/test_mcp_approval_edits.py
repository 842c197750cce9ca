"""Edit-on-approve over MCP (the SDK's own client, in process): ``agentq_approve``
with ``args`` runs the edited call; arguments that break the tool's schema are
an error result and decide nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.surfaces._extras import require

require("mcp", "mcp")

from mcp import Client

from agentq import Runtime, TaskStatus
from agentq.demo_server import DemoAPI
from agentq.mcp.server import build_server
from agentq.server.auth import Principal, Scope
from tests.surfaces.conftest import worker_thread

CAROL = Principal("carol", frozenset({Scope.APPROVE, Scope.READ, Scope.ENQUEUE}))
AGENT = Principal("refund-agent", frozenset({Scope.READ, Scope.ENQUEUE}))


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
