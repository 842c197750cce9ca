"""The crash of issue 41 for LangGraph, with real processes: a ReAct-style
``StateGraph`` (an ``agent`` node asking the scripted model over HTTP, a
``refunds`` node whose refunds are agentq tasks staged with
``AgentQSaver.step`` and awaited with ``step.wait``) in the tools folder every
worker loads, its continuation declared with ``resume_waiting``. The user's
process starts the thread and waits for it; it is SIGKILLed after the refunds
node committed a refund, and the worker too while the refund is applied.
Started again as users start them (same thread id, same prompt), the refund is
charged once, and the model is asked once per committed step (turn 1 by the
user's process, turn 2 by the worker that resumes the graph). The scenario is
:func:`tests.acceptance._crash.kill_mid_charge_and_restart`, shared with the
durable-run tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq import Runtime
from agentq.ledger import TaskStatus
from agentq.testing import LoopbackAPI, ScriptedModel
from tests.acceptance._crash import (
    REFUND_TOOL,
    agent_argv,
    db,
    kill_mid_charge_and_restart,
    project,
    script,
)
from tests.surfaces._extras import require

require("langgraph", "langchain")  # the workers' tools folder imports LangGraph

pytestmark = pytest.mark.slow
__all__ = ["db"]  # the database fixture (SQLite, PostgreSQL)

#: The graph, in the tools folder (``agentq worker --tools`` finds the resume).
GRAPH = '''
import json
import operator
import os
from typing import Annotated, Any

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agentq import ToolContext, tool
from agentq.adapters.langgraph_checkpoint import AgentQSaver, ResumeArgs, resume_waiting


class Chat(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], operator.add]


def build(saver: AgentQSaver) -> Any:
    def agent(state: Chat, config: RunnableConfig) -> Chat:
        messages = state["messages"]
        turn = 1 + sum(m["role"] == "assistant" for m in messages)
        headers = {"X-AgentQ-Run": config["configurable"]["thread_id"], "X-AgentQ-Turn": str(turn)}
        answer = httpx.post(os.environ["REFUND_MODEL_URL"] + "/chat/completions", headers=headers,
                            json={"model": "scripted", "messages": messages}, timeout=60)
        answer.raise_for_status()
        return {"messages": [answer.json()["choices"][0]["message"]]}

    def refunds(state: Chat, config: RunnableConfig) -> Chat:
        step = saver.step(config)
        calls = state["messages"][-1]["tool_calls"]
        for call in calls:
            step.enqueue(call["function"]["name"], json.loads(call["function"]["arguments"]))
        outcomes = step.wait("resume_refund_graph")
        return {"messages": [{"role": "tool", "tool_call_id": c["id"],
                              "content": json.dumps(o.get("result") or o.get("error"))}
                             for c, o in zip(calls, outcomes)]}

    def route(state: Chat) -> str:
        return "refunds" if state["messages"][-1].get("tool_calls") else END

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("refunds", refunds)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["refunds", END])
    builder.add_edge("refunds", "agent")
    return builder.compile(checkpointer=saver)


@tool("resume_refund_graph", queue="langgraph", visible=False)
def resume_refund_graph(ctx: ToolContext, args: ResumeArgs) -> dict[str, Any]:
    return resume_waiting(ctx.runtime, build(AgentQSaver(ctx.runtime)), args)
'''

#: The user's process: start the thread (or carry it on), wait until it ends.
STARTER = '''
import sys
import time

sys.path.insert(0, sys.argv[2])
from agentq import Runtime
from agentq.adapters.langgraph_checkpoint import AgentQSaver
from refund_graph import build

THREAD = {"configurable": {"thread_id": "conv-7"}}
with Runtime(sys.argv[1], tools=sys.argv[2], policies=sys.argv[3]) as rt:
    graph = build(AgentQSaver(rt))
    state = graph.get_state(THREAD)
    if not state.interrupts and (state.next or not state.values):  # neither waiting nor done
        start = None if state.next else {"messages": [
            {"role": "user", "content": "Refund order o1: 40.00"}]}
        graph.invoke(start, THREAD, durability="sync")
    deadline = time.monotonic() + 120
    while graph.get_state(THREAD).next and time.monotonic() < deadline:
        time.sleep(0.05)  # a worker resumes it once its refund is done
    state = graph.get_state(THREAD)
    print("next", list(state.next), flush=True)
    print("answer", state.values["messages"][-1]["content"], flush=True)
'''


def test_a_graph_killed_after_its_node_enqueued_a_refund_charges_once_when_restarted(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("REFUND_MODEL_URL", model.base_url)
        tools, policies = project(
            tmp_path, api, {"refunds": REFUND_TOOL, "refund_graph": GRAPH}
        )
        rt = Runtime(db, tools=tools, policies=policies)

        def killed() -> None:  # the refund committed with the node's step; no answer yet
            (refund,) = [t for t in rt.tasks() if t.tool == "execute_refund"]
            assert refund.status is not TaskStatus.SUCCEEDED, refund

        try:
            out = kill_mid_charge_and_restart(
                db, tmp_path, api, tools, policies,
                agent_argv(tmp_path, STARTER, db, str(tools), str(policies)), killed=killed,
            )  # fmt: skip
            (refund,) = [t for t in rt.tasks() if t.tool == "execute_refund"]
        finally:
            rt.close()
        assert "next []" in out and "answer Refunded: " in out, out
        assert model.requests_per_turn() == {("conv-7", 1): 1, ("conv-7", 2): 1}
        assert api.charges_per_key() == {refund.task_id: 1} and len(api.applied()) == 1
