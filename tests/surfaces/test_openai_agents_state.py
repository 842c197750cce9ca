"""The SDK's interrupted runs kept with agentq: a run interrupted for an approval
is saved and its process ends; the approval is given in another process, days
later as far as anything here knows; a third process resumes it. The real SDK
(Runner, RunState, OpenAIChatCompletionsModel) over real HTTP to agentq's
ScriptedModel on loopback, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from tests.surfaces._extras import require

require("agents", "openai-agents")

from agents import Agent as SDKAgent
from agents import OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from agentq import Runtime, TaskStatus
from agentq.adapters import openai_agents_state
from agentq.adapters.openai_agents import AgentQTools
from agentq.adapters.openai_agents_state import (
    STATES,
    StateChanged,
    approve_saved,
    load_state,
    reject_saved,
    save_state,
)
from agentq.approvals import ApprovalStatus
from agentq.demo_server import DemoAPI
from agentq.scripted_model import ScriptedModel
from agentq.scripted_replies import ModelRequest, Reply
from tests.surfaces.conftest import worker_thread

set_tracing_disabled(True)  # no trace export: the tests reach no network

_T = TypeVar("_T")
PROMPT = "Please refund order B7: 250.00"
KEY = "ticket-7"


def answer(request: ModelRequest) -> Reply:
    if request.turn == 1:
        return Reply.tool_calls(("execute_refund", {"order_id": "B7", "amount": 250}))
    return Reply.text(f"tool said: {request.messages[-1]['content']}")


@pytest.fixture
def llm() -> Iterator[ScriptedModel]:
    with ScriptedModel(answer) as model:
        yield model


class Process:
    """What one process builds: a runtime, the SDK agent with agentq's tools, and
    its own OpenAI client (closed with the event loop it ran on)."""

    def __init__(self, rt: Runtime, llm: ScriptedModel) -> None:
        self.rt = rt
        self.llm = llm
        self.tools = AgentQTools(rt, conversation=KEY, wait_seconds=20)

    def run(self, fn: Callable[[SDKAgent[Any]], Coroutine[Any, Any, _T]]) -> _T:
        async def go() -> _T:
            async with AsyncOpenAI(base_url=self.llm.base_url, api_key="k",
                                   max_retries=0) as client:  # fmt: skip
                model = OpenAIChatCompletionsModel("scripted-gpt", openai_client=client)
                agent = SDKAgent(name="support", tools=self.tools.function_tools(), model=model)
                return await fn(agent)

        return asyncio.run(asyncio.wait_for(go(), timeout=60))


CONFIG = RunConfig(tracing_disabled=True)


def interrupted(process: Process) -> str:
    """Runs until agentq's policy holds the refund; saves the state; the call id."""

    async def fn(agent: SDKAgent[Any]) -> str:
        result = await Runner.run(agent, PROMPT, run_config=CONFIG)
        (item,) = result.interruptions
        await save_state(process.rt, KEY, result.to_state())
        return str(item.raw_item.call_id)  # type: ignore[union-attr]

    return process.run(fn)


def resumed(process: Process) -> Any:
    async def fn(agent: SDKAgent[Any]) -> Any:
        state = await load_state(process.rt, KEY, agent, tools=process.tools)
        assert state is not None
        return (await Runner.run(agent, state, run_config=CONFIG)).final_output

    with worker_thread(process.rt):
        return process.run(fn)


def test_an_approval_given_in_another_process_resumes_the_saved_run_in_a_third(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    first = Process(open_rt(), llm)
    call_id = interrupted(first)
    (waiting,) = first.rt.approvals()
    first.rt.close()  # the process that ran the agent is gone

    second = Process(open_rt(), llm)
    info = second.run(lambda agent: approve_saved(second.rt, KEY, agent, call_id,
                                                  by="ops-lead", tools=second.tools))  # fmt: skip
    assert info is not None and info.status is TaskStatus.QUEUED
    assert second.rt.approval(waiting.approval_id).decided_by == "ops-lead"
    saved = second.rt.backend.get_record(STATES, KEY)
    assert saved is not None and saved["version"] == 2 and saved["waiting_on"] == [call_id]
    second.rt.close()

    third = Process(open_rt(), llm)
    output = resumed(third)
    assert "succeeded" in output and len(api.applied()) == 1
    assert llm.requests_per_turn() == {(None, 1): 1, (None, 2): 1}  # turn 1 asked once


def test_an_approval_given_in_any_agentq_surface_reaches_the_saved_run(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    first = Process(open_rt(), llm)
    interrupted(first)
    (waiting,) = first.rt.approvals()
    first.rt.approve(waiting.approval_id, by="ops-lead")  # HTTP, the CLI, the console...
    output = resumed(Process(open_rt(), llm))
    assert "succeeded" in output and len(api.applied()) == 1


def test_a_rejection_given_in_agentq_is_a_rejection_in_the_run(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    first = Process(open_rt(), llm)
    interrupted(first)
    (waiting,) = first.rt.approvals()
    first.rt.reject(waiting.approval_id, by="ops-lead", note="fraud")
    output = resumed(Process(open_rt(), llm))
    assert "not approved in agentq: rejected" in output and api.applied() == []


def test_reject_saved_rejects_in_agentq_and_in_the_state_together(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, api: DemoAPI
) -> None:
    first = Process(open_rt(), llm)
    call_id = interrupted(first)
    info = first.run(lambda agent: reject_saved(first.rt, KEY, agent, call_id, by="ops-lead",
                                                note="fraud", tools=first.tools))  # fmt: skip
    assert info is not None and info.status is TaskStatus.CANCELLED
    output = resumed(Process(open_rt(), llm))
    assert "rejected by ops-lead: fraud" in output and api.applied() == []


def test_a_state_saved_again_meanwhile_refuses_the_decision_and_agentq_records_none(
    open_rt: Callable[..., Runtime], llm: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    process = Process(open_rt(), llm)
    call_id = interrupted(process)
    found = openai_agents_state._task

    async def racing(tools: Any, state: Any, item: Any) -> Any:
        await save_state(process.rt, KEY, state)  # another approver's save, meanwhile
        return await found(tools, state, item)

    monkeypatch.setattr(openai_agents_state, "_task", racing)
    with pytest.raises(StateChanged):
        process.run(lambda agent: approve_saved(process.rt, KEY, agent, call_id,
                                                by="ops-lead", tools=process.tools))  # fmt: skip
    (waiting,) = process.rt.approvals()
    assert waiting.status is ApprovalStatus.PENDING  # the approval was not recorded either
    saved = process.rt.backend.get_record(STATES, KEY)
    assert saved is not None and saved["version"] == 2


def test_nothing_saved_is_none_and_deciding_on_it_is_refused(
    open_rt: Callable[..., Runtime], llm: ScriptedModel
) -> None:
    process = Process(open_rt(), llm)
    assert process.run(lambda agent: load_state(process.rt, "nothing", agent)) is None
    with pytest.raises(StateChanged):
        process.run(lambda agent: approve_saved(process.rt, "nothing", agent, "c", by="x"))
