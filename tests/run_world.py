"""A world for durable agent run tests: an OpenAI-compatible model answered in
process (an ``httpx.MockTransport``, no server), two tools (one local) and two
agents. The HTTP API's tests and the CLI's build their runtimes from it.

The model follows a script: ``refund N`` calls the tools (a local note, a
refund of N, and with ``refund N and more`` also a tool no agent offers), their
results are answered with ``done: ...``, any other message with ``echo: ...``.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import httpx
from pydantic import BaseModel

from agentq import Agent, FakeClock, OpenAICompatibleModel, Runtime, ToolContext, tool
from agentq.agents.turn import RUN_HEADER
from agentq.policies import ApprovalRule, ModelPrice, Policy

__all__ = ["CHARGES", "ECHO", "REFUNDS", "MockModel", "run_runtime"]

class Refund(BaseModel):
    order_id: str
    amount: float


class Mark(BaseModel):
    order_id: str


CHARGES: list[tuple[str, float]] = []


@tool(queue="payments")
def refund_order(ctx: ToolContext, args: Refund) -> dict[str, Any]:
    CHARGES.append((ctx.task_id, args.amount))
    return {"refunded": args.amount}


@tool(local=True)
def note_order(tx: Any, args: Mark) -> dict[str, Any]:
    return {"noted": args.order_id}


class MockModel:
    """The OpenAI-compatible chat endpoint of the module docstring; it counts the
    requests per run."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.lock = threading.Lock()
        #: When set, each answer waits for it (a test holds a turn while it looks).
        self.gate: threading.Event | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request.headers.get(RUN_HEADER, ""))
        if self.gate is not None:
            self.gate.wait(10)
        messages = json.loads(request.content)["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            message: dict[str, Any] = {"role": "assistant", "content": f"done: {last['content']}"}
        elif str(last["content"]).startswith("refund "):
            amount = float(str(last["content"]).split()[1])
            calls = [_call("note_order", {"order_id": "o1"}),
                     _call("refund_order", {"order_id": "o1", "amount": amount})]
            if str(last["content"]).endswith(" and more"):
                calls.append(_call("transfer_funds", {"to": "elsewhere"}))  # not offered
            message = {"role": "assistant", "content": None, "tool_calls": calls}
        else:
            message = {"role": "assistant", "content": f"echo: {last['content']}"}
        return httpx.Response(200, json={
            "id": "cmpl", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })  # fmt: skip

    def asked(self, run_id: str) -> int:
        with self.lock:
            return self.requests.count(run_id)


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


MODEL = OpenAICompatibleModel("http://model.test/v1", "scripted")
REFUNDS = Agent("refunds", MODEL, instructions="Refund what is asked.",
                tools=["refund_order", "note_order"])  # fmt: skip
ECHO = Agent("echo", MODEL, tools=[])




def run_runtime(url: str, model: MockModel) -> Runtime:
    """A runtime of the two agents on ``url``, asking ``model``, on a fake clock;
    a refund above 100 waits for a human's approval, and a turn (10 prompt and
    5 completion tokens) costs 0.02."""
    return Runtime(
        url, tools=[refund_order, note_order], agents=[REFUNDS, ECHO], clock=FakeClock(),
        http_transport=httpx.MockTransport(model),
        policies=Policy(approvals=(ApprovalRule(tool="refund_order", field="amount",
                                                above=100),),
                        prices={"scripted": ModelPrice(prompt=1000, completion=2000)}),
    )  # fmt: skip
