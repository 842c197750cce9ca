"""The chaos run's LangGraph graph (``--frameworks langgraph``), in a tools
folder every worker loads: a ReAct-style ``StateGraph`` over ``AgentQSaver``.
``agent`` asks the scripted model on loopback (``X-AgentQ-Run``: the thread,
``X-AgentQ-Turn``: 1 + the assistant messages so far, ``X-Chaos-Worker``: this
process, so the model's hook can SIGKILL it); while the answer has tool calls,
``refunds`` stages each as an ``execute_refund`` task (``saver.step``) and
waits for them (``step.wait``): the continuation ``resume_chaos_graph``
resumes the graph in a worker. A 429 or 500 is asked again after its
``Retry-After``, as OpenAI's client does. The user's process that starts a
thread is :func:`tests.chaos.graphs.starter`. The crash acceptance test
(``tests/acceptance/test_langgraph_durable_crash.py``) runs the same graph."""

from __future__ import annotations

import json
import operator
import os
import time
from typing import Annotated, Any

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agentq import ToolContext, tool
from agentq.adapters.langgraph_checkpoint import AgentQSaver, ResumeArgs, resume_waiting

RESUME_TOOL = "resume_chaos_graph"


class Chat(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], operator.add]


def ask(thread_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's answer to ``messages`` (retried on 429 and 5xx)."""
    turn = 1 + sum(m["role"] == "assistant" for m in messages)
    headers = {"X-AgentQ-Run": thread_id, "X-AgentQ-Turn": str(turn),
               "X-Chaos-Worker": str(os.getpid())}  # fmt: skip
    url = os.environ["AGENTQ_CHAOS_MODEL_URL"] + "/chat/completions"
    for _ in range(30):
        answer = httpx.post(url, headers=headers, timeout=30,
                            json={"model": "scripted", "messages": messages})  # fmt: skip
        if answer.status_code == 429 or answer.status_code >= 500:
            time.sleep(float(answer.headers.get("retry-after") or 0.2))
            continue
        answer.raise_for_status()
        message: dict[str, Any] = answer.json()["choices"][0]["message"]
        return message
    raise RuntimeError(f"the model kept answering {answer.status_code}")


def build(saver: AgentQSaver) -> Any:
    def agent(state: Chat, config: RunnableConfig) -> Chat:
        return {"messages": [ask(config["configurable"]["thread_id"], state["messages"])]}

    def refunds(state: Chat, config: RunnableConfig) -> Chat:
        step = saver.step(config)
        calls = state["messages"][-1]["tool_calls"]
        for call in calls:
            step.enqueue(call["function"]["name"], json.loads(call["function"]["arguments"]))
        outcomes = step.wait(RESUME_TOOL)
        return {"messages": [{"role": "tool", "tool_call_id": c["id"],
                              "content": json.dumps(o.get("result") or o.get("error"))}
                             for c, o in zip(calls, outcomes, strict=True)]}  # fmt: skip

    def route(state: Chat) -> str:
        return "refunds" if state["messages"][-1].get("tool_calls") else END

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("refunds", refunds)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["refunds", END])
    builder.add_edge("refunds", "agent")
    return builder.compile(checkpointer=saver)


@tool(RESUME_TOOL, queue="langgraph", visible=False)
def resume_chaos_graph(ctx: ToolContext, args: ResumeArgs) -> dict[str, Any]:
    """Resume a chaos thread whose refunds are done (not offered to agents)."""
    return resume_waiting(ctx.runtime, build(AgentQSaver(ctx.runtime)), args)
