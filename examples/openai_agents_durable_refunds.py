"""An OpenAI Agents SDK agent run durably: its turns and its tool calls are agentq tasks.

``durable_agent`` declares an ``agents.Agent`` as an agentq agent. Each turn of
a run asks the agent's model once, through the SDK's ``OpenAIChatCompletionsModel``
(a scripted OpenAI-compatible server on loopback stands in for the LLM, over
real HTTP), and commits the answer with the refund task it calls. The policy
gates refunds above 100, so the run waits for a human: one row, no process.
The process that started it is then gone (a deploy); its successor starts the
same run again (same idempotency key, same prompt), as users restart things,
and gets the waiting run back: the model is not asked again. A human approves,
a worker charges the refund once and asks the model for the last turn. The
conversation then goes on in an SDK ``Session`` kept in the same database.
"""

# expect: turn 1 committed: run awaiting_approval, model requests: 1
# expect: restarted starter: same run, awaiting_approval, model requests: 1
# expect: approved by ops-lead: run succeeded: Refunded 250.0 for order B7.
# expect: model requests per turn: [1, 1]
# expect: refunds charged: 1
# expect: session items: user, function_call, function_call_output, assistant

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled
from openai import AsyncOpenAI

from agentq import Runtime
from agentq.adapters.openai_agents_durable import durable_agent, run_items, turn_http_client
from agentq.adapters.openai_agents_session import AgentQSession
from agentq.scripted_replies import ModelRequest, Reply
from agentq.testing import LoopbackAPI, ScriptedModel

ROOT = Path(__file__).resolve().parents[1]
set_tracing_disabled(True)  # the example reaches no network beyond loopback


def llm(request: ModelRequest) -> Reply:
    """Asks for one large refund, then reports what the tool returned."""
    if request.turn == 1:
        return Reply.tool_calls(("execute_refund", {"order_id": "B7", "amount": 250}))
    refund = json.loads(str(request.messages[-1]["content"]))
    return Reply.text(f"Refunded {refund['amount']} for order B7.")


def support_agent(base_url: str) -> Agent[None]:
    # The OpenAI client sends through each turn's agentq client: its host
    # allow-list, Idempotency-Key and Retry-After handling.
    client = AsyncOpenAI(base_url=base_url, api_key="sk-example", http_client=turn_http_client())
    return Agent(name="support", instructions="You handle refund requests.",
                 model=OpenAIChatCompletionsModel("gpt-4o", openai_client=client))  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api, ScriptedModel(llm) as model:
        settings = {"payments_url": api.url, "notifications_url": api.url}
        db = f"sqlite:///{Path(tmp) / 'agentq.db'}"

        def open_runtime() -> Runtime:
            # Declared once, where every worker loads it.
            agent = durable_agent(support_agent(model.base_url), tools=["execute_refund"],
                                  max_turns=5)  # fmt: skip
            return Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                           settings=settings, agents=[agent])  # fmt: skip

        prompt = "Please refund order B7: 250.00"
        with open_runtime() as rt:
            run = rt.start_run("support", prompt, idempotency_key="ticket-7", by="support-bot")
            rt.worker().drain()  # normally `agentq worker`, in other processes
            run = rt.run(run.run_id)
            print(f"turn 1 committed: run {run.status}, model requests: {len(model.requests())}")

        # The starting process is gone; its successor starts the run again.
        with open_runtime() as rt:
            again = rt.start_run("support", prompt, idempotency_key="ticket-7", by="support-bot")
            same = "same run" if again.run_id == run.run_id else "another run"
            print(f"restarted starter: {same}, {again.status}, "
                  f"model requests: {len(model.requests())}")  # fmt: skip
            (approval,) = rt.approvals()
            rt.approve(approval.approval_id, by="ops-lead")
            rt.worker().drain()
            run = rt.run(run.run_id)
            print(f"approved by ops-lead: run {run.status}: {run.output}")

            per_turn = model.requests_per_turn()
            print(f"model requests per turn: {[per_turn[k] for k in sorted(per_turn)]}")
            print(f"refunds charged: {len(api.applied())}")

            # The conversation as the SDK's items, in a Session in the same database.
            session = AgentQSession(rt, "ticket-7")
            asyncio.run(session.add_items(run_items(run)))
            items = asyncio.run(session.get_items())
            kinds = ", ".join(str(i.get("role") or i.get("type")) for i in items)
            print(f"session items: {kinds}")


if __name__ == "__main__":
    main()
