"""A LangGraph agent whose refund tool is an agentq task, with an approval interrupt.

LangChain's GenericFakeChatModel stands in for the LLM. The large refund
interrupts the graph with the agentq approval id; the approver decides in
agentq, and the graph resumes with that id (a bare True would run nothing).
"""

# expect: interrupted for approval: True
# expect: tool result: succeeded; model said: refund issued
# expect: approved by: ops-lead
# expect: refunds charged: 1

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from agentq import Runtime
from agentq.adapters.langchain import agentq_tools
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]


def build_graph(tools: list[Any]) -> Any:
    llm = GenericFakeChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "execute_refund", "id": "call-1",
                                           "args": {"order_id": "D4", "amount": 900}}]),
        AIMessage(content="refund issued"),
    ]))  # fmt: skip
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api:
        settings = {"payments_url": api.url, "notifications_url": api.url}
        db = f"sqlite:///{Path(tmp) / 'agentq.db'}"
        with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                     settings=settings) as rt:  # fmt: skip
            app = build_graph(agentq_tools(rt, wait_seconds=10, interrupt_on_approval=True))
            thread: Any = {"configurable": {"thread_id": "ticket-4"}}
            paused = app.invoke({"messages": [("user", "refund order D4")]}, thread)
            approval_id = paused["__interrupt__"][0].value["approval_id"]
            print(f"interrupted for approval: {approval_id.startswith('apr_')}")
            rt.approve(approval_id, by="ops-lead")  # the human decides in agentq
            rt.worker().drain()  # a worker (normally `agentq worker`) runs the refund
            state = app.invoke(Command(resume=approval_id), thread)
            told = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
            print(f"tool result: {told[-1]['status']}; model said: {state['messages'][-1].content}")
            print(f"approved by: {rt.approval(approval_id).decided_by}")
        print(f"refunds charged: {len(api.applied())}")


if __name__ == "__main__":
    main()
