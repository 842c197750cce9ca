"""An OpenAI Agents SDK agent whose refund tool is an agentq task.

The SDK's ScriptedModel stands in for the LLM. A large refund interrupts the run
(agentq's policy asks a human); the approver decides through agentq, recorded by
name, and the resumed run gets the refund's result. `RunState.approve` alone
would run nothing.
"""

# expect: interrupted for approval: 1 call(s)
# expect: tool result: succeeded; model said: refund issued
# expect: approved by: ops-lead
# expect: refunds charged: 1

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agentq import Runtime
from agentq.adapters.openai_agents import AgentQTools
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]


async def main() -> None:
    set_tracing_disabled(True)  # this example reaches no network
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api:
        settings = {"payments_url": api.url, "notifications_url": api.url}
        db = f"sqlite:///{Path(tmp) / 'agentq.db'}"
        with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                     settings=settings) as rt:  # fmt: skip
            tools = AgentQTools(rt, conversation="ticket-9", wait_seconds=10)
            llm = ScriptedModel([
                [function_call("execute_refund", {"order_id": "C3", "amount": 400},
                               call_id="call-1")],
                [assistant_message("refund issued")],
            ])  # fmt: skip
            agent = Agent(name="refunds", tools=tools.function_tools(), model=llm)

            result = await Runner.run(agent, "refund order C3")
            print(f"interrupted for approval: {len(result.interruptions)} call(s)")
            state = result.to_state()
            for item in result.interruptions:
                await tools.approve(state, item, by="ops-lead")  # recorded in agentq
            rt.worker().drain()  # a worker (normally `agentq worker`) runs the refund
            result = await Runner.run(agent, state)
            output = next(json.loads(i.output) for i in result.new_items
                          if i.type == "tool_call_output_item")  # fmt: skip
            print(f"tool result: {output['status']}; model said: {result.final_output}")
            print(f"approved by: {rt.approvals()[0].decided_by}")
        print(f"refunds charged: {len(api.applied())}")


if __name__ == "__main__":
    asyncio.run(main())
