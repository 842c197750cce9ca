"""An MCP client calls the refund tool of `agentq mcp` (a real server process on stdio).

A small refund finishes within the call's wait; a large one comes back as a task
handle with MCP status `input_required`, an operator approves it in agentq, and
the client polls the same task to its result.

On PostgreSQL, by the URL alone: ``AGENTQ_DB=postgresql://user@host/db python
examples/mcp_server.py`` (an empty database).
"""

# expect: small refund: completed
# expect: large refund: input_required
# expect: after approval by ops-lead: completed
# expect: refunds charged: 2

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from mcp import Client, StdioServerParameters

from agentq import Runtime
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]


async def agent(server: StdioServerParameters, rt: Runtime) -> None:
    async with Client(server) as client:
        small = await client.call_tool("execute_refund", {"order_id": "A1", "amount": 30})
        rt.worker().drain()  # a worker (normally `agentq worker`) runs the queued task
        task_id = small.structured_content["task_id"]
        done = await client.call_tool("agentq_wait_task", {"task_id": task_id})
        print(f"small refund: {done.structured_content['mcp_status']}")

        large = await client.call_tool("execute_refund", {"order_id": "A2", "amount": 500})
        handle = large.structured_content
        print(f"large refund: {handle['mcp_status']}")
        rt.approve(handle["approval_id"], by="ops-lead")  # a human, in agentq
        rt.worker().drain()
        done = await client.call_tool(
            "agentq_wait_task", {"task_id": handle["task_id"], "timeout_seconds": 10}
        )
        print(f"after approval by {rt.approval(handle['approval_id']).decided_by}: "
              f"{done.structured_content['mcp_status']}")  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api:
        db = os.environ.get("AGENTQ_DB") or f"sqlite:///{Path(tmp) / 'agentq.db'}"
        settings = {"payments_url": api.url, "notifications_url": api.url}
        server = StdioServerParameters(
            command=str(Path(sys.executable).parent / "agentq"),
            args=["mcp", "--db", db, "--tools", str(ROOT / "tools"), "--policies",
                  str(ROOT / "policies"), "--wait", "0",
                  *(f"--setting={k}={v}" for k, v in settings.items())],
        )  # fmt: skip
        with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies", settings=settings) as rt:
            asyncio.run(agent(server, rt))
        print(f"refunds charged: {len(api.applied())}")


if __name__ == "__main__":
    main()
