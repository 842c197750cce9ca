"""An OpenAI Agents SDK agent as a durable agentq agent: the real SDK, its
OpenAIChatCompletionsModel over real HTTP to agentq's ScriptedModel on loopback
(which mints fresh tool-call ids on every request, as providers do), the
project's refund tool against the loopback payments API, on SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.surfaces._extras import require

require("agents", "openai-agents")

from agents import Agent as SDKAgent
from agents import (
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    set_tracing_disabled,
)
from agents.models.chatcmpl_converter import Converter
from openai import AsyncOpenAI

from agentq import Agent, RunStatus, Runtime
from agentq.adapters.openai_agents import AgentQTools
from agentq.adapters.openai_agents_durable import (
    durable_agent,
    run_items,
    to_input_items,
    turn_http_client,
)
from agentq.demo_server import DemoAPI
from agentq.errors import ConfigError
from agentq.scripted_model import ScriptedModel
from agentq.scripted_replies import ModelRequest, Reply

set_tracing_disabled(True)  # no trace export: the tests reach no network

PROMPT = "Please refund order B7"


def refunding(amount: float) -> Callable[[ModelRequest], Reply]:
    """Turn 1 calls execute_refund; later turns report what the tool returned."""

    def answer(request: ModelRequest) -> Reply:
        if request.turn == 1:
            return Reply.tool_calls(("execute_refund", {"order_id": "B7", "amount": amount}),
                                    content="Refunding.")  # fmt: skip
        returned = json.loads(str(request.messages[-1]["content"]))
        return Reply.text(f"Refunded {returned.get('amount')} for order B7.")

    return answer


@pytest.fixture
def llm() -> Iterator[ScriptedModel]:
    with ScriptedModel(refunding(40)) as model:
        yield model


def sdk_agent(llm: ScriptedModel, **kw: Any) -> SDKAgent[Any]:
    client = AsyncOpenAI(base_url=llm.base_url, api_key="test-key", http_client=turn_http_client())
    model = OpenAIChatCompletionsModel("scripted-gpt", openai_client=client)
    return SDKAgent(name="support", instructions="You handle refunds.", model=model, **kw)


def agentq_agent(llm: ScriptedModel) -> Agent:
    return durable_agent(sdk_agent(llm), tools=["execute_refund"], max_turns=5)


def drain(rt: Runtime, queues: list[str] | None = None) -> None:
    rt.worker(receive_timeout=0.05, queues=queues).drain()


def test_a_run_asks_the_sdk_model_once_per_turn_and_charges_once(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    rt = open_rt(agents=[agentq_agent(llm)])
    run = rt.start_run("support", PROMPT, idempotency_key="ticket-1")
    drain(rt)
    run = rt.run(run.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == "Refunded 40.0 for order B7."
    assert llm.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
    assert len(api.applied()) == 1
    assert run.turns[0].calls[0].tool == "execute_refund" and run.turns[0].model == "scripted-gpt"
    assert run.usage.total_tokens > 0
    first, second = llm.requests()
    # through agentq's turn client: the turn task's id is the request's idempotency key
    assert first.idempotency_key == run.turns[0].task_id
    assert second.idempotency_key == run.turns[1].task_id


def test_each_request_is_the_sdk_agents_instructions_tools_and_conversation(
    open_rt: Callable[..., Runtime], api: DemoAPI
) -> None:
    seen: list[ModelRequest] = []
    answer = refunding(40)

    def recording(request: ModelRequest) -> Reply:
        seen.append(request)
        return answer(request)

    def instructions(ctx: Any, agent: Any) -> str:
        return f"You handle refunds for {ctx.context['company']}."

    with ScriptedModel(recording) as llm:
        sdk = sdk_agent(llm).clone(instructions=instructions)
        agent = durable_agent(sdk, tools=["execute_refund"], context={"company": "Acme"})
        rt = open_rt(agents=[agent])
        run = rt.start_run("support", PROMPT)
        drain(rt)
        assert rt.run(run.run_id).status is RunStatus.SUCCEEDED
    for request in seen:
        assert request.messages[0] == {"role": "system",
                                       "content": "You handle refunds for Acme."}  # fmt: skip
        assert [t["function"]["name"] for t in request.tools] == ["execute_refund"]
    roles = [m["role"] for m in seen[1].messages]
    assert roles == ["system", "user", "assistant", "tool"]
    call = seen[1].messages[2]["tool_calls"][0]
    assert seen[1].messages[3]["tool_call_id"] == call["id"]


def test_a_restarted_starter_finds_the_run_charges_once_and_asks_each_turn_once(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    """Killed after the step enqueued the refund: turn 1 committed (the model's
    answer and the refund task, one transaction) and nothing ran it. A new
    process (another Runtime on the same database, another SDK agent object)
    starts the run again as a user would: same idempotency key, same input."""
    first = open_rt(agents=[agentq_agent(llm)])
    started = first.start_run("support", PROMPT, idempotency_key="ticket-9")
    drain(first, queues=["agent_turns"])  # turn 1 commits; its refund is not run yet
    assert first.run(started.run_id).status is RunStatus.AWAITING_TOOLS
    assert api.applied() == [] and len(llm.requests()) == 1
    first.close()  # the process is gone

    second = open_rt(agents=[agentq_agent(llm)])
    again = second.start_run("support", PROMPT, idempotency_key="ticket-9")
    assert again.run_id == started.run_id and again.turn == 1
    drain(second)
    run = second.run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert second.start_run("support", PROMPT, idempotency_key="ticket-9").run_id == run.run_id
    assert llm.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
    assert len(api.applied()) == 1


def test_without_durable_runs_a_restarted_runner_charges_twice(
    rt: Runtime, llm: ScriptedModel, api: DemoAPI
) -> None:
    """What the durable core prevents: the SDK's own runner, restarted after a
    crash that came after the refund, asks the model again, which mints a fresh
    call id: a second refund task, a second charge (an SDK session saves the
    turn only after the run, so it does not help)."""
    from tests.surfaces.conftest import worker_thread

    tools = AgentQTools(rt, conversation="ticket-2", wait_seconds=20)

    async def one_process() -> None:
        async with AsyncOpenAI(base_url=llm.base_url, api_key="k", max_retries=0) as client:
            model = OpenAIChatCompletionsModel("scripted-gpt", openai_client=client)
            agent = SDKAgent(name="support", tools=tools.function_tools(), model=model)
            await Runner.run(agent, PROMPT, run_config=RunConfig(tracing_disabled=True))

    with worker_thread(rt):
        for _ in range(2):  # the first run "crashes" after its refund; the restart runs again
            asyncio.run(one_process())
    assert len(api.applied()) == 2


def test_an_approval_gated_refund_waits_for_a_human_then_the_run_goes_on(
    open_rt: Callable[..., Runtime], api: DemoAPI
) -> None:
    with ScriptedModel(refunding(250)) as llm:
        rt = open_rt(agents=[agentq_agent(llm)])
        run = rt.start_run("support", PROMPT, by="support-bot")
        drain(rt)
        assert rt.run(run.run_id).status is RunStatus.AWAITING_APPROVAL
        (approval,) = rt.approvals()
        rt.approve(approval.approval_id, by="ops-lead")
        drain(rt)
        run = rt.run(run.run_id)
        assert run.status is RunStatus.SUCCEEDED, run.error
        assert llm.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
    assert len(api.applied()) == 1


def test_a_throttled_turn_is_retried_at_retry_after_and_the_client_sends_no_retries(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    llm.fail_next(429, retry_after=30)
    rt = open_rt(agents=[agentq_agent(llm)])
    run = rt.start_run("support", PROMPT)
    drain(rt)
    (turn,) = [t for t in rt.tasks() if t.tool == "agent_turn_support"]
    assert turn.status.value == "retry_scheduled"
    assert len(llm.requests()) == 1  # the OpenAI client's own retries sent nothing
    assert rt.run(run.run_id).status is RunStatus.QUEUED


def test_run_items_give_the_conversation_back_to_the_sdk(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    rt = open_rt(agents=[agentq_agent(llm)])
    run = rt.start_run("support", PROMPT)
    drain(rt)
    run = rt.run(run.run_id)
    items = run_items(run)
    assert [i.get("type", "message") for i in items] == [
        "message", "message", "function_call", "function_call_output", "message",
    ]  # fmt: skip
    # the SDK reads them back as the conversation agentq recorded
    assert Converter.items_to_messages(items) == [
        {k: v for k, v in m.items() if v is not None or k == "content"} for m in run.messages
    ]


def test_call_ids_missing_or_repeated_are_made_unique_and_stay_paired() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "x", "type": "function", "function": {"name": "b", "arguments": "{}"}},
            {"id": "x", "type": "function", "function": {"name": "c", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "", "content": "1"},
        {"role": "tool", "tool_call_id": "x", "content": "2"},
        {"role": "tool", "tool_call_id": "x", "content": "3"},
    ]  # fmt: skip
    items = to_input_items(messages)
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]  # type: ignore[typeddict-item]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]  # type: ignore[typeddict-item]
    assert calls == outputs == ["agentq-1-0", "x", "agentq-1-2"]


def test_the_turn_client_sends_nothing_outside_a_turn(llm: ScriptedModel) -> None:
    client = AsyncOpenAI(base_url=llm.base_url, api_key="k", http_client=turn_http_client(),
                         max_retries=0)  # fmt: skip
    with pytest.raises(Exception, match="only inside an agentq turn"):
        asyncio.run(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]))
    assert llm.requests() == []


def test_an_agent_with_parts_that_would_run_outside_agentq_is_refused(llm: ScriptedModel) -> None:
    async def invoke(ctx: Any, args: str) -> str:
        return "charged"

    own = FunctionTool(name="charge", description="", params_json_schema={"type": "object"},
                       on_invoke_tool=invoke)  # fmt: skip
    with pytest.raises(ConfigError, match="tool charge"):
        durable_agent(sdk_agent(llm, tools=[own]))
    with pytest.raises(ConfigError, match="handoff"):
        durable_agent(sdk_agent(llm, handoffs=[sdk_agent(llm)]))
    with pytest.raises(ConfigError, match="output_type"):
        durable_agent(sdk_agent(llm, output_type=int))
    with pytest.raises(ConfigError, match="name"):
        durable_agent(sdk_agent(llm).clone(name="Support bot"))
    assert durable_agent(sdk_agent(llm).clone(name="Support bot"), name="support").name == "support"
