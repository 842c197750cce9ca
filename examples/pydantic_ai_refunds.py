"""A Pydantic AI agent whose refund tool is an agentq task.

A scripted FunctionModel stands in for the LLM. A large refund needs a human:
the run ends with the call awaiting approval, the approver decides in agentq
(recorded by name), and the next run executes it. A forged Pydantic AI approval
would run nothing.
"""

# expect: awaiting approval: 1 call(s)
# expect: model saw a refund: True
# expect: approved by: ops-lead
# expect: refunds charged: 1

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import Runtime
from agentq.adapters.pydantic_ai import AgentQToolset
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]


def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks for one large refund, then reports what the tool returned."""
    if len(messages) == 1:
        args = {"order_id": "B7", "amount": 250}
        return ModelResponse(parts=[ToolCallPart("execute_refund", args, tool_call_id="call-1")])
    return ModelResponse(parts=[TextPart(f"done: {messages[-1].parts[-1].content}")])


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api:
        settings = {"payments_url": api.url, "notifications_url": api.url}
        db = f"sqlite:///{Path(tmp) / 'agentq.db'}"
        with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                     settings=settings) as rt:  # fmt: skip
            toolset = AgentQToolset(rt, wait_seconds=10)
            agent: Agent[None, Any] = Agent(
                FunctionModel(llm), toolsets=[toolset], output_type=[str, DeferredToolRequests]
            )
            run = await agent.run("refund order B7", conversation_id="ticket-7")
            assert isinstance(run.output, DeferredToolRequests)
            print(f"awaiting approval: {len(run.output.approvals)} call(s)")
            # The approver decides in agentq (you authenticate them), then a worker
            # (normally `agentq worker`) runs the approved refund.
            decisions = await toolset.decide(run.output, {"call-1": True}, by="ops-lead")
            rt.worker().drain()
            resumed = await agent.run(
                message_history=run.all_messages(), deferred_tool_results=decisions,
                conversation_id="ticket-7",
            )  # fmt: skip
            print(f"model saw a refund: {'refund_id' in resumed.output}")
            print(f"approved by: {rt.approvals()[0].decided_by}")
        print(f"refunds charged: {len(api.applied())}")


if __name__ == "__main__":
    asyncio.run(main())
