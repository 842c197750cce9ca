"""The OpenAI Agents adapter, driven by the SDK's own ScriptedModel."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.surfaces._extras import require

require("agents", "openai-agents")

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agentq import Runtime, TaskStatus
from agentq.adapters.openai_agents import AgentQTools
from agentq.demo_server import DemoAPI
from tests.surfaces.conftest import worker_thread

set_tracing_disabled(True)  # no trace export: the tests reach no network


def refunds(rt: Runtime) -> list[Any]:
    return [t for t in rt.tasks() if t.tool == "execute_refund"]


def model(*steps: list[Any]) -> ScriptedModel:
    return ScriptedModel(list(steps))


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def refund_call(order: str, amount: float, call_id: str) -> list[Any]:
    return [function_call("execute_refund", {"order_id": order, "amount": amount},
                          call_id=call_id)]  # fmt: skip


def test_a_call_repeated_with_one_call_id_is_one_task(rt: Runtime, api: DemoAPI) -> None:
    # The SDK drops a repeated call id within one run, so the repeat is a second run of
    # the conversation (a retried request, a run replayed from saved history).
    tools = AgentQTools(rt, conversation="conv-1", wait_seconds=20)
    outputs = []
    with worker_thread(rt):
        for _ in range(2):
            agent = Agent(name="refunds", tools=tools.function_tools(), model=model(
                refund_call("o1", 30, "call_1"), [assistant_message("done")],
            ))  # fmt: skip
            result = run(Runner.run(agent, "refund o1"))
            outputs += [json.loads(i.output) for i in result.new_items
                        if i.type == "tool_call_output_item"]  # fmt: skip
    assert [o["status"] for o in outputs] == ["succeeded", "succeeded"]
    assert outputs[0]["task_id"] == outputs[1]["task_id"]
    assert len(refunds(rt)) == 1 and len(api.applied()) == 1


def test_args_digest_mode_makes_a_re_minted_call_id_the_same_task(
    rt: Runtime, api: DemoAPI
) -> None:
    tools = AgentQTools(rt, conversation="conv-2", wait_seconds=20, key_mode="args")
    agent = Agent(name="refunds", tools=tools.function_tools(), model=model(
        refund_call("o2", 30, "call_a"), refund_call("o2", 30, "call_b"),
        [assistant_message("done")],
    ))  # fmt: skip
    with worker_thread(rt):
        run(Runner.run(agent, "refund o2"))
    assert len(refunds(rt)) == 1 and len(api.applied()) == 1


def test_approval_pauses_the_run_and_resumes_it_naming_the_approver(
    rt: Runtime, api: DemoAPI
) -> None:
    tools = AgentQTools(rt, conversation="conv-3", wait_seconds=20)
    agent = Agent(name="refunds", tools=tools.function_tools(), model=model(
        refund_call("o3", 500, "call_3"), [assistant_message("refunded")],
    ))  # fmt: skip
    first = run(Runner.run(agent, "refund o3"))
    (item,) = first.interruptions
    (task,) = refunds(rt)
    assert task.status is TaskStatus.AWAITING_APPROVAL
    state = first.to_state()
    decided = run(tools.approve(state, item, by="carol"))
    assert decided.task_id == task.task_id
    with worker_thread(rt):
        resumed = run(Runner.run(agent, state))
    assert resumed.final_output == "refunded"
    assert rt.task(task.task_id).status is TaskStatus.SUCCEEDED and len(api.applied()) == 1
    assert rt.approval(str(task.approval_id)).decided_by == "carol"
    assert rt.approval(str(task.approval_id)).reason == ""  # not "openai-agents:..." (39, 2.12)


def test_a_client_side_approval_agentq_did_not_record_runs_nothing(
    rt: Runtime, api: DemoAPI
) -> None:
    tools = AgentQTools(rt, conversation="conv-4", wait_seconds=5)
    agent = Agent(name="refunds", tools=tools.function_tools(), model=model(
        refund_call("o4", 500, "call_4"), [assistant_message("told")],
    ))  # fmt: skip
    first = run(Runner.run(agent, "refund o4"))
    state = first.to_state()
    state.approve(first.interruptions[0])  # the SDK's approval only: agentq has none
    with worker_thread(rt):
        resumed = run(Runner.run(agent, state))
    outputs = [json.loads(i.output) for i in resumed.new_items
               if i.type == "tool_call_output_item"]  # fmt: skip
    assert outputs[-1]["status"] == "awaiting_approval"
    (task,) = refunds(rt)
    assert task.status is TaskStatus.AWAITING_APPROVAL and api.applied() == []


def test_only_a_call_held_for_approval_is_enqueued_before_the_sdk_invokes_it(
    rt: Runtime,
) -> None:
    from agents import RunContextWrapper

    (refund,) = AgentQTools(rt, conversation="conv-5", tools=["execute_refund"]).function_tools()
    check = refund.needs_approval
    assert callable(check)
    ctx = RunContextWrapper(context=None)
    # a small refund runs only when invoked (after the SDK's input guardrails)
    assert not run(check(ctx, {"order_id": "o5", "amount": 20}, "call_small"))
    assert refunds(rt) == []
    assert run(check(ctx, {"order_id": "o5", "amount": 800}, "call_large"))
    (held,) = refunds(rt)
    assert held.status is TaskStatus.AWAITING_APPROVAL


def test_a_misspelled_argument_queues_nothing_and_the_model_is_told(rt: Runtime) -> None:
    """Issue 28: ``curency`` was dropped and the refund queued in USD."""
    tools = AgentQTools(rt, conversation="conv-t", wait_seconds=0)
    typo = [function_call("execute_refund", {"order_id": "X-1", "amount": 50, "curency": "EUR"},
                          call_id="call_t")]  # fmt: skip
    agent = Agent(name="refunds", tools=tools.function_tools(),
                  model=model(typo, [assistant_message("done")]))  # fmt: skip
    result = run(Runner.run(agent, "refund X-1"))
    outputs = [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]
    assert len(outputs) == 1 and "curency" in outputs[0], outputs
    assert refunds(rt) == []
