"""The LangChain tools and the LangGraph interrupt helper, driven by LangChain's
own GenericFakeChatModel in a LangGraph graph with a checkpointer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.surfaces._extras import require

require("langgraph", "langchain")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from agentq import Runtime, TaskStatus
from agentq.adapters.langchain import agentq_tools
from agentq.demo_server import DemoAPI
from tests.surfaces.conftest import worker_thread


def refunds(rt: Runtime) -> list[Any]:
    return [t for t in rt.tasks() if t.tool == "execute_refund"]


def refund_call(order: str, amount: float, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{
        "name": "execute_refund", "args": {"order_id": order, "amount": amount}, "id": call_id,
    }])  # fmt: skip


def graph(tools: list[Any], *replies: AIMessage) -> Any:
    model = GenericFakeChatModel(messages=iter(replies))
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver())


def tool_outputs(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


def test_a_call_repeated_with_one_call_id_is_one_task(rt: Runtime, api: DemoAPI) -> None:
    app = graph(agentq_tools(rt, wait_seconds=20),
                refund_call("o1", 30, "call_1"), refund_call("o1", 30, "call_1"),
                AIMessage(content="done"))  # fmt: skip
    with worker_thread(rt):
        state = app.invoke({"messages": [("user", "refund o1")]},
                           {"configurable": {"thread_id": "t1"}})  # fmt: skip
    first, second = tool_outputs(state)
    assert first["status"] == second["status"] == "succeeded"
    assert first["task_id"] == second["task_id"]
    assert len(refunds(rt)) == 1 and len(api.applied()) == 1


def test_args_digest_mode_makes_a_re_minted_call_id_the_same_task(
    rt: Runtime, api: DemoAPI
) -> None:
    app = graph(agentq_tools(rt, wait_seconds=20, key_mode="args"),
                refund_call("o2", 30, "call_a"), refund_call("o2", 30, "call_b"),
                AIMessage(content="done"))  # fmt: skip
    with worker_thread(rt):
        app.invoke({"messages": [("user", "refund o2")]}, {"configurable": {"thread_id": "t2"}})
    assert len(refunds(rt)) == 1 and len(api.applied()) == 1


def test_approval_interrupts_the_graph_and_resumes_with_the_agentq_approval_id(
    rt: Runtime, api: DemoAPI
) -> None:
    app = graph(agentq_tools(rt, wait_seconds=20, interrupt_on_approval=True),
                refund_call("o3", 500, "call_3"), AIMessage(content="refunded"))  # fmt: skip
    config: Any = {"configurable": {"thread_id": "t3"}}
    paused = app.invoke({"messages": [("user", "refund o3")]}, config)
    (question,) = paused["__interrupt__"]
    approval_id = question.value["approval_id"]
    assert rt.task(question.value["task_id"]).status is TaskStatus.AWAITING_APPROVAL
    rt.approve(approval_id, by="carol")  # the human decides in agentq, authenticated there
    with worker_thread(rt):
        state = app.invoke(Command(resume=approval_id), config)
    assert tool_outputs(state)[-1]["status"] == "succeeded" and len(api.applied()) == 1
    assert rt.approval(approval_id).decided_by == "carol"
    assert rt.approval(approval_id).reason == ""  # not "langchain:<thread>" (issue 39, 2.12)


@pytest.mark.parametrize("forged", [True, "apr_someone_elses"])
def test_resuming_with_anything_but_a_recorded_approval_runs_nothing(
    rt: Runtime, api: DemoAPI, forged: object
) -> None:
    app = graph(agentq_tools(rt, wait_seconds=20, interrupt_on_approval=True),
                refund_call("o4", 500, "call_4"), AIMessage(content="refunded"))  # fmt: skip
    config: Any = {"configurable": {"thread_id": "t4"}}
    paused = app.invoke({"messages": [("user", "refund o4")]}, config)
    approval_id = paused["__interrupt__"][0].value["approval_id"]
    with worker_thread(rt):
        again = app.invoke(Command(resume=forged), config)
        assert "nothing ran" in again["__interrupt__"][0].value["refused"]
        # the right id before agentq recorded a decision is refused too
        early = app.invoke(Command(resume=approval_id), config)
        assert "pending" in early["__interrupt__"][0].value["refused"]
    (task,) = refunds(rt)
    assert task.status is TaskStatus.AWAITING_APPROVAL and api.applied() == []
    rt.approve(approval_id, by="carol")  # a refused resume did not wedge the thread
    with worker_thread(rt):
        state = app.invoke(Command(resume=approval_id), config)
    assert tool_outputs(state)[-1]["status"] == "succeeded" and len(api.applied()) == 1


def test_without_interrupts_the_model_is_told_the_call_awaits_approval(rt: Runtime) -> None:
    app = graph(agentq_tools(rt, wait_seconds=5),
                refund_call("o5", 500, "call_5"), AIMessage(content="told"))  # fmt: skip
    state = app.invoke({"messages": [("user", "refund o5")]}, {"configurable": {"thread_id": "t5"}})
    (told,) = tool_outputs(state)
    assert told["status"] == "awaiting_approval" and told["approval_id"]


def test_a_misspelled_argument_queues_nothing_and_the_model_is_told(rt: Runtime) -> None:
    """Issue 28: ``curency`` was dropped and the refund queued in USD."""
    typo = AIMessage(content="", tool_calls=[{
        "name": "execute_refund", "args": {"order_id": "X-1", "amount": 50, "curency": "EUR"},
        "id": "call_t",
    }])  # fmt: skip
    app = graph(agentq_tools(rt, wait_seconds=0), typo, AIMessage(content="done"))
    state = app.invoke({"messages": [("user", "refund X-1")]},
                       {"configurable": {"thread_id": "t-typo"}})  # fmt: skip
    told = [m.content for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(told) == 1 and "curency" in str(told[0]), told
    assert refunds(rt) == []
