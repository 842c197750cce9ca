"""A Pydantic AI agent run durably: its turns and its tool calls are agentq tasks.

``durable_agent`` declares a ``pydantic_ai.Agent`` as an agentq agent. Each turn
of a run asks the agent's model once (a scripted FunctionModel stands in for the
LLM) and commits the answer with the refund task it calls. The policy gates
refunds above 100, so the run waits for a human: one row, no process. The
process that started it is then gone (a deploy); its successor starts the same
run again (same idempotency key, same prompt), as users restart things, and gets
the waiting run back: the model is not asked again. A human approves, a worker
charges the refund once and asks the model for the last turn. The conversation
comes back as Pydantic AI messages.
"""

# expect: turn 1 committed: run awaiting_approval, model requests: 1
# expect: restarted starter: same run, awaiting_approval, model requests: 1
# expect: approved by ops-lead: run succeeded: Refunded 250.0 for order B7.
# expect: model requests per turn: [1, 1]
# expect: refunds charged: 1
# expect: as Pydantic AI messages: request, response, request, response

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import Runtime
from agentq.adapters.pydantic_ai_durable import durable_agent, run_messages
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]
#: The turn each model request was for.
REQUESTS: list[int] = []


def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks for one large refund, then reports what the tool returned."""
    turn = 1 + sum(isinstance(m, ModelResponse) for m in messages)
    REQUESTS.append(turn)
    if turn == 1:
        args = {"order_id": "B7", "amount": 250}
        return ModelResponse(parts=[ToolCallPart("execute_refund", args)])  # a fresh call id
    refund = json.loads(str(messages[-1].parts[-1].content))
    return ModelResponse(parts=[TextPart(f"Refunded {refund['amount']} for order B7.")])


support = Agent(FunctionModel(llm), instructions="You handle refund requests.", name="support")
# Declared once, where every worker loads it.
agent = durable_agent(support, tools=["execute_refund"], max_turns=5)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api:
        settings = {"payments_url": api.url, "notifications_url": api.url}
        db = f"sqlite:///{Path(tmp) / 'agentq.db'}"

        def open_runtime() -> Runtime:
            return Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                           settings=settings, agents=[agent])  # fmt: skip

        prompt = "Please refund order B7: 250.00"
        with open_runtime() as rt:
            run = rt.start_run("support", prompt, idempotency_key="ticket-7", by="support-bot")
            rt.worker().drain()  # normally `agentq worker`, in other processes
            run = rt.run(run.run_id)
            print(f"turn 1 committed: run {run.status}, model requests: {len(REQUESTS)}")

        # The starting process is gone; its successor starts the run again.
        with open_runtime() as rt:
            again = rt.start_run("support", prompt, idempotency_key="ticket-7", by="support-bot")
            same = "same run" if again.run_id == run.run_id else "another run"
            print(f"restarted starter: {same}, {again.status}, model requests: {len(REQUESTS)}")
            (approval,) = rt.approvals()
            rt.approve(approval.approval_id, by="ops-lead")
            rt.worker().drain()
            run = rt.run(run.run_id)
            print(f"approved by ops-lead: run {run.status}: {run.output}")

        print(f"model requests per turn: {[REQUESTS.count(t) for t in sorted(set(REQUESTS))]}")
        print(f"refunds charged: {len(api.applied())}")
        messages = run_messages(run, support)
        stored = ModelMessagesTypeAdapter.dump_json(messages)  # for agent.run(message_history=)
        kinds = ", ".join(m.kind for m in ModelMessagesTypeAdapter.validate_json(stored))
        print(f"as Pydantic AI messages: {kinds}")


if __name__ == "__main__":
    main()
