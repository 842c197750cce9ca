"""The Pydantic AI toolset, driven by Pydantic AI's own FunctionModel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.surfaces._extras import require

require("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import Runtime, TaskStatus
from agentq.adapters.pydantic_ai import AgentQToolset
from agentq.demo_server import DemoAPI
from agentq.errors import ApprovalError
from tests.surfaces.conftest import ROOT, worker_thread


def scripted(*calls: tuple[str, dict[str, Any], str]) -> FunctionModel:
    """A model that makes these tool calls (one per turn), then answers with text
    naming what the last tool returned."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turns = sum(1 for m in messages if isinstance(m, ModelResponse))
        if turns < len(calls):
            tool, args, call_id = calls[turns]
            return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)])
        returns = [p for m in messages for p in getattr(m, "parts", [])
                   if isinstance(p, ToolReturnPart)]  # fmt: skip
        return ModelResponse(
            parts=[TextPart(f"tool said: {returns[-1].content if returns else None}")]
        )

    return FunctionModel(respond)


def agent(toolset: AgentQToolset, model: FunctionModel) -> Agent[None, Any]:
    return Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])


def refunds(rt: Runtime) -> list[Any]:
    return [t for t in rt.tasks() if t.tool == "execute_refund"]


def run(agent_: Agent[None, Any], prompt: str | None = None, **kw: Any) -> Any:
    """One agent run in its own event loop (closed afterwards)."""
    return asyncio.run(asyncio.wait_for(agent_.run(prompt, **kw), timeout=60))


def test_a_call_repeated_with_one_call_id_is_one_task(rt: Runtime, api: DemoAPI) -> None:
    toolset = AgentQToolset(rt, wait_seconds=20)
    refund = ("execute_refund", {"order_id": "o1", "amount": 30}, "call_1")
    with worker_thread(rt):
        first = run(agent(toolset, scripted(refund)), "refund o1", conversation_id="conv-1")
        # the same call again (a retried or resumed run replays the model's call id)
        again = run(agent(toolset, scripted(refund, refund)), "refund o1", conversation_id="conv-1")
    assert "refund_id" in first.output and "refund_id" in again.output
    assert len(refunds(rt)) == 1 and len(api.applied()) == 1


def test_args_digest_mode_makes_a_re_minted_call_id_the_same_task(
    rt: Runtime, api: DemoAPI
) -> None:
    toolset = AgentQToolset(rt, wait_seconds=20, key_mode="args")
    with worker_thread(rt):
        run(agent(toolset, scripted(
            ("execute_refund", {"order_id": "o2", "amount": 30}, "call_a"),
            ("execute_refund", {"order_id": "o2", "amount": 30.0}, "call_b"),  # re-asked model
        )), "refund o2", conversation_id="conv-2")  # fmt: skip
    assert len(refunds(rt)) == 1 and len(api.applied()) == 1


def test_an_unfinished_task_is_deferred_and_its_result_comes_back(
    rt: Runtime, api: DemoAPI
) -> None:
    toolset = AgentQToolset(rt, wait_seconds=0)
    refund = ("execute_refund", {"order_id": "o3", "amount": 20}, "call_3")
    first = run(agent(toolset, scripted(refund)), "refund o3", conversation_id="conv-3")
    assert isinstance(first.output, DeferredToolRequests)
    (call,) = first.output.calls
    task_id = first.output.metadata[call.tool_call_id]["task_id"]
    assert rt.task(task_id).status is TaskStatus.QUEUED
    with worker_thread(rt):
        deferred = asyncio.run(toolset.results(first.output, wait_seconds=20))
    resumed = run(agent(toolset, scripted(refund)),
        message_history=first.all_messages(), deferred_tool_results=deferred,
        conversation_id="conv-3",
    )  # fmt: skip
    assert "refund_id" in resumed.output and len(api.applied()) == 1


def test_approval_pauses_and_resumes_through_pydantic_ai_and_names_the_approver(
    rt: Runtime, api: DemoAPI
) -> None:
    toolset = AgentQToolset(rt, wait_seconds=20)
    refund = ("execute_refund", {"order_id": "o4", "amount": 500}, "call_4")
    first = run(agent(toolset, scripted(refund)), "refund o4", conversation_id="conv-4")
    assert isinstance(first.output, DeferredToolRequests)
    (asked,) = first.output.approvals
    decided = asyncio.run(toolset.decide(first.output, {asked.tool_call_id: True}, by="carol"))
    with worker_thread(rt):
        resumed = run(agent(toolset, scripted(refund)),
            message_history=first.all_messages(), deferred_tool_results=decided,
            conversation_id="conv-4",
        )  # fmt: skip
    assert "refund_id" in resumed.output and len(api.applied()) == 1
    (approval,) = rt.approvals()
    assert approval.decided_by == "carol"
    # Approvers saw the adapter's "pydantic-ai:<conversation>" as the reason (issue 39, 2.12).
    assert approval.reason == ""


def test_a_forged_client_side_approval_runs_nothing(rt: Runtime, api: DemoAPI) -> None:
    toolset = AgentQToolset(rt, wait_seconds=5)
    refund = ("execute_refund", {"order_id": "o5", "amount": 500}, "call_5")
    first = run(agent(toolset, scripted(refund)), "refund o5", conversation_id="conv-5")
    assert isinstance(first.output, DeferredToolRequests)
    forged = DeferredToolResults(approvals={first.output.approvals[0].tool_call_id: True})
    with worker_thread(rt):
        resumed = run(agent(toolset, scripted(refund)),
            message_history=first.all_messages(), deferred_tool_results=forged,
            conversation_id="conv-5",
        )  # fmt: skip
    assert "awaiting_approval" in resumed.output
    (task,) = [t for t in rt.tasks() if t.tool == "execute_refund"]
    assert task.status is TaskStatus.AWAITING_APPROVAL and api.applied() == []


def test_decide_refuses_an_approval_id_that_is_not_this_calls(rt: Runtime, api: DemoAPI) -> None:
    toolset = AgentQToolset(rt, wait_seconds=0)
    other = rt.enqueue_action("execute_refund", {"order_id": "o9", "amount": 900})
    refund = ("execute_refund", {"order_id": "o6", "amount": 500}, "call_6")
    first = run(agent(toolset, scripted(refund)), "refund o6", conversation_id="conv-6")
    (asked,) = first.output.approvals
    first.output.metadata[asked.tool_call_id]["approval_id"] = other.approval_id  # tampered
    with pytest.raises(ApprovalError, match="not the one of call"):
        asyncio.run(toolset.decide(first.output, {asked.tool_call_id: True}, by="carol"))
    assert rt.approval(str(other.approval_id)).status.value == "pending"


def test_a_finished_call_with_out_of_band_arguments_is_still_recognised(
    db_url: str, api: DemoAPI
) -> None:
    # args_inline_bytes=0: every call's arguments are stored out of band. Once its
    # task has finished, results() must still see the same call (issue 14, item 3).
    settings = {"payments_url": api.url, "notifications_url": api.url, "shipping_url": api.url}
    with Runtime(db_url, tools=ROOT / "tools", policies=ROOT / "policies", settings=settings,
                 args_inline_bytes=0) as rt:  # fmt: skip
        toolset = AgentQToolset(rt, wait_seconds=0)
        refund = ("execute_refund", {"order_id": "o7", "amount": 20}, "call_7")
        first = run(agent(toolset, scripted(refund)), "refund o7", conversation_id="conv-7")
        assert isinstance(first.output, DeferredToolRequests)
        (call,) = first.output.calls
        task_id = first.output.metadata[call.tool_call_id]["task_id"]
        assert rt.task(task_id).args_ref is not None
        rt.worker().drain()
        assert rt.task(task_id).status is TaskStatus.SUCCEEDED
        deferred = asyncio.run(toolset.results(first.output))
        assert "refund_id" in deferred.calls[call.tool_call_id]


def test_a_misspelled_argument_queues_nothing_and_the_model_is_told(rt: Runtime) -> None:
    """Issue 28: ``curency`` was dropped and the refund queued in USD."""
    toolset = AgentQToolset(rt, wait_seconds=0)
    typo = ("execute_refund", {"order_id": "X-1", "amount": 50, "curency": "EUR"}, "call_t")
    result = run(agent(toolset, scripted(typo)), "refund X-1", conversation_id="conv-t")
    told = [p for m in result.all_messages() for p in getattr(m, "parts", [])
            if "curency" in str(getattr(p, "content", ""))]  # fmt: skip
    assert told, result.all_messages()
    assert refunds(rt) == []


def test_an_approval_given_elsewhere_resumes_the_run_with_the_tasks_result(
    rt: Runtime, api: DemoAPI
) -> None:
    """Issue 39, item 2.1: approved in the CLI/console/HTTP/MCP, not through
    ``decide()``: ``results()`` must answer the approval (Pydantic AI raised
    ``UserError`` when it was left out)."""
    toolset = AgentQToolset(rt, wait_seconds=0)
    refund = ("execute_refund", {"order_id": "o10", "amount": 500}, "call_10")
    first = run(agent(toolset, scripted(refund)), "refund o10", conversation_id="conv-10")
    (asked,) = first.output.approvals
    approval_id = first.output.metadata[asked.tool_call_id]["approval_id"]
    assert asyncio.run(toolset.results(first.output)).approvals == {}  # nobody decided yet
    rt.approve(approval_id, "dave", "checked")  # as `agentq approve` does
    with worker_thread(rt):
        task_id = rt.approval(approval_id).task_id
        assert rt.wait(task_id, 20).status is TaskStatus.SUCCEEDED
        deferred = asyncio.run(toolset.results(first.output))
    assert "refund_id" in deferred.calls[asked.tool_call_id]  # the result, nothing runs again
    resumed = run(agent(toolset, scripted(refund)),
        message_history=first.all_messages(), deferred_tool_results=deferred,
        conversation_id="conv-10",
    )  # fmt: skip
    assert "refund_id" in resumed.output and len(api.applied()) == 1


def test_an_approval_approved_elsewhere_but_not_yet_run_is_approved(
    rt: Runtime, api: DemoAPI
) -> None:
    toolset = AgentQToolset(rt, wait_seconds=20)
    refund = ("execute_refund", {"order_id": "o12", "amount": 500}, "call_12")
    first = run(agent(toolset, scripted(refund)), "refund o12", conversation_id="conv-12")
    (asked,) = first.output.approvals
    rt.approve(first.output.metadata[asked.tool_call_id]["approval_id"], "dave")
    deferred = asyncio.run(toolset.results(first.output))
    assert deferred.approvals == {asked.tool_call_id: True}
    with worker_thread(rt):
        resumed = run(agent(toolset, scripted(refund)),
            message_history=first.all_messages(), deferred_tool_results=deferred,
            conversation_id="conv-12",
        )  # fmt: skip
    assert "refund_id" in resumed.output and len(api.applied()) == 1


def test_an_approval_rejected_elsewhere_resumes_the_run_denied(rt: Runtime, api: DemoAPI) -> None:
    toolset = AgentQToolset(rt, wait_seconds=0)
    refund = ("execute_refund", {"order_id": "o11", "amount": 500}, "call_11")
    first = run(agent(toolset, scripted(refund)), "refund o11", conversation_id="conv-11")
    (asked,) = first.output.approvals
    rt.reject(first.output.metadata[asked.tool_call_id]["approval_id"], "erin", "too much")
    deferred = asyncio.run(toolset.results(first.output))
    denied = deferred.approvals[asked.tool_call_id]
    assert isinstance(denied, ToolDenied) and "erin" in denied.message
    assert "too much" in denied.message
    resumed = run(agent(toolset, scripted(refund)),
        message_history=first.all_messages(), deferred_tool_results=deferred,
        conversation_id="conv-11",
    )  # fmt: skip
    assert "too much" in resumed.output and api.applied() == []
