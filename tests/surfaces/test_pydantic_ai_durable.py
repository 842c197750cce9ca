"""A Pydantic AI agent as a durable agentq agent, driven by Pydantic AI's own
FunctionModel (it mints fresh tool-call ids on every request, as providers do)
on the fake clock, on a real SQLite file."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.surfaces._extras import require

require("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import FakeClock, RunStatus, Runtime, ToolContext, tool
from agentq.adapters.pydantic_ai_durable import (
    durable_agent,
    run_messages,
    to_model_messages,
    turn_http_client,
)
from agentq.errors import ConfigError
from agentq.policies import ApprovalRule, Policy

#: Every charge of execute_refund: (task id, amount).
CHARGES: list[tuple[str, float]] = []


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="payments")
def execute_refund(ctx: ToolContext, args: Refund) -> dict[str, Any]:
    """Refund an order."""
    CHARGES.append((ctx.task_id, args.amount))
    return {"refunded": args.amount, "order_id": args.order_id}


@pytest.fixture(autouse=True)
def _no_charges() -> Iterator[None]:
    CHARGES.clear()
    yield
    CHARGES.clear()


class Scripted:
    """A Pydantic AI model function: the first turn calls execute_refund, the
    next ones answer with what the last tool returned. It records every request."""

    def __init__(self, *, calls: list[ToolCallPart] | None = None) -> None:
        self.requests: list[tuple[list[ModelMessage], AgentInfo]] = []
        self.calls = calls

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append((list(messages), info))
        if not any(isinstance(m, ModelResponse) for m in messages):
            calls = self.calls or [ToolCallPart("execute_refund", {"order_id": "o1", "amount": 40})]
            return ModelResponse(parts=[TextPart("Refunding."), *calls])
        last = messages[-1].parts[-1]
        return ModelResponse(parts=[TextPart(f"done: {getattr(last, 'content', None)}")])

    def turns(self) -> list[int]:
        """The turn each request was for (1 + the answers it was sent)."""
        return [1 + sum(isinstance(m, ModelResponse) for m in msgs) for msgs, _ in self.requests]


def pydantic_agent(model: Scripted, **kw: Any) -> PydanticAgent[None, str]:
    return PydanticAgent(FunctionModel(model), instructions="You handle refunds.",
                         system_prompt="Company: Acme.", name="refunds", **kw)  # fmt: skip


def runtime(db: Path, model: Scripted, *, approvals: bool = False) -> Runtime:
    agent = durable_agent(pydantic_agent(model), tools=["execute_refund"], max_turns=5)
    policy = Policy(approvals=(ApprovalRule(tool="execute_refund"),)) if approvals else None
    return Runtime(f"sqlite:///{db}", tools=[execute_refund], agents=[agent],
                   clock=FakeClock(), policies=policy)  # fmt: skip


def drain(rt: Runtime, queues: list[str] | None = None) -> None:
    rt.worker(receive_timeout=0.05, queues=queues).drain()


def test_a_run_calls_an_agentq_tool_then_answers(tmp_path: Path) -> None:
    model = Scripted()
    with runtime(tmp_path / "agentq.db", model) as rt:
        run = rt.start_run("refunds", "refund order o1", idempotency_key="ticket-1")
        drain(rt)
        run = rt.run(run.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == 'done: {"refunded": 40.0, "order_id": "o1"}'
    assert len(CHARGES) == 1 and CHARGES[0][1] == 40.0
    assert CHARGES[0][0] == run.turns[0].calls[0].task_id
    assert model.turns() == [1, 2]  # the model asked exactly once per turn
    assert [t.content for t in run.turns] == ["Refunding.", run.output]
    assert run.usage.total_tokens == sum(t.usage.total_tokens for t in run.turns) > 0
    assert run.turns[0].model == "function:Scripted:"


def test_each_turn_is_asked_as_pydantic_ai_assembles_it(tmp_path: Path) -> None:
    model = Scripted()
    with runtime(tmp_path / "agentq.db", model) as rt:
        run = rt.start_run("refunds", "refund order o1")
        drain(rt)
        run = rt.send_message(run.run_id, "thanks!")
        drain(rt)
        assert rt.run(run.run_id).status is RunStatus.SUCCEEDED
    assert model.turns() == [1, 2, 3]
    for messages, info in model.requests:
        # the agent's instructions, its system prompt, and agentq's tools, every turn
        assert info.instructions == "You handle refunds."
        assert [t.name for t in info.function_tools] == ["execute_refund"]
        first = messages[0]
        assert isinstance(first, ModelRequest)
        assert [type(p) for p in first.parts] == [SystemPromptPart, UserPromptPart]
    second, _ = model.requests[1]
    (call,) = [p for p in second[1].parts if isinstance(p, ToolCallPart)]
    (returned,) = second[2].parts
    assert isinstance(returned, ToolReturnPart)
    assert (returned.tool_call_id, returned.tool_name) == (call.tool_call_id, "execute_refund")
    third, _ = model.requests[2]
    assert isinstance(third[-1], ModelRequest) and third[-1].parts[-1].content == "thanks!"


def test_run_messages_round_trip_through_pydantic_ai_serialization(tmp_path: Path) -> None:
    model = Scripted()
    with runtime(tmp_path / "agentq.db", model) as rt:
        run = rt.start_run("refunds", "refund order o1")
        drain(rt)
        run = rt.run(run.run_id)
    messages = run_messages(run, pydantic_agent(Scripted()))
    loaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))
    assert loaded == messages
    kinds = [(type(m).__name__, [type(p).__name__ for p in m.parts]) for m in loaded]
    assert kinds == [
        ("ModelRequest", ["SystemPromptPart", "UserPromptPart"]),
        ("ModelResponse", ["TextPart", "ToolCallPart"]),
        ("ModelRequest", ["ToolReturnPart"]),
        ("ModelResponse", ["TextPart"]),
    ]
    response, returned = loaded[1], loaded[2].parts[0]
    assert isinstance(response, ModelResponse) and isinstance(returned, ToolReturnPart)
    assert response.parts[1].tool_call_id == returned.tool_call_id == run.turns[0].calls[0].call_id
    assert response.usage.input_tokens == run.turns[0].usage.prompt_tokens
    assert response.model_name == run.turns[0].model
    # without the agent: the conversation alone, as agentq recorded it
    assert [type(p) for p in run_messages(run)[0].parts] == [UserPromptPart]


def test_an_approval_gated_call_waits_for_a_human_then_the_run_goes_on(tmp_path: Path) -> None:
    model = Scripted()
    with runtime(tmp_path / "agentq.db", model, approvals=True) as rt:
        run = rt.start_run("refunds", "refund order o1", by="support-bot")
        drain(rt)
        assert rt.run(run.run_id).status is RunStatus.AWAITING_APPROVAL
        assert CHARGES == [] and model.turns() == [1]
        (approval,) = rt.approvals()
        rt.approve(approval.approval_id, by="ops-lead")
        assert rt.run(run.run_id).status is RunStatus.AWAITING_TOOLS
        drain(rt)
        run = rt.run(run.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert len(CHARGES) == 1 and model.turns() == [1, 2]


def test_a_restarted_starter_finds_the_run_and_the_model_is_not_asked_again(
    tmp_path: Path,
) -> None:
    """The process that started the run is gone once turn 1 committed: another
    process (another Runtime on the same file, another model object) starts the
    run again with the same idempotency key and input."""
    db = tmp_path / "agentq.db"
    first = Scripted()
    with runtime(db, first) as rt:
        started = rt.start_run("refunds", "refund order o1", idempotency_key="ticket-9")
        drain(rt, queues=["agent_turns"])  # turn 1 commits; its refund is not run yet
        assert rt.run(started.run_id).status is RunStatus.AWAITING_TOOLS
    assert first.turns() == [1] and CHARGES == []

    second = Scripted()
    with runtime(db, second) as rt:
        again = rt.start_run("refunds", "refund order o1", idempotency_key="ticket-9")
        assert again.run_id == started.run_id and again.turn == 1
        drain(rt)
        run = rt.run(started.run_id)
        assert rt.start_run("refunds", "refund order o1",
                            idempotency_key="ticket-9").run_id == run.run_id  # fmt: skip
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert first.turns() + second.turns() == [1, 2]  # turn 1 asked once, by the first
    assert Counter(task_id for task_id, _ in CHARGES) == {run.turns[0].calls[0].task_id: 1}


def test_a_turn_whose_request_failed_is_asked_again_and_commits_once(tmp_path: Path) -> None:
    failures = itertools.count()

    class Flaky(Scripted):
        def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if next(failures) == 0:
                self.requests.append((list(messages), info))
                raise RuntimeError("connection reset")
            return super().__call__(messages, info)

    model = Flaky()
    with runtime(tmp_path / "agentq.db", model) as rt:
        run = rt.start_run("refunds", "refund order o1")
        for _ in range(10):  # the failed turn is retried after its backoff
            drain(rt)
            rt.backend.clock.advance(60)  # type: ignore[attr-defined]
            if rt.run(run.run_id).done:
                break
        run = rt.run(run.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert model.turns() == [1, 1, 2] and len(run.turns) == 2 and len(CHARGES) == 1


def test_malformed_calls_are_refused_and_the_model_is_told(tmp_path: Path) -> None:
    model = Scripted(calls=[
        ToolCallPart("delete_everything", {}, tool_call_id="c1"),
        ToolCallPart("execute_refund", "{not json", tool_call_id="c2"),
        ToolCallPart("execute_refund", {"order_id": "o1"}, tool_call_id="c3"),
    ])  # fmt: skip
    with runtime(tmp_path / "agentq.db", model) as rt:
        run = rt.start_run("refunds", "refund order o1")
        drain(rt)
        run = rt.run(run.run_id)
    assert run.status is RunStatus.SUCCEEDED and CHARGES == []
    assert [c.task_id for c in run.turns[0].calls] == [None, None, None]
    told, _ = model.requests[1]
    returns = [p for p in told[-1].parts if isinstance(p, ToolReturnPart)]
    assert [r.tool_call_id for r in returns] == ["c1", "c2", "c3"]
    assert all(str(r.content).startswith("error:") for r in returns)
    assert "delete_everything" in str(returns[0].content)


def test_call_ids_missing_or_repeated_are_made_unique_and_stay_paired() -> None:
    messages = [
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
    _, response, request = to_model_messages(messages)
    assert isinstance(response, ModelResponse) and isinstance(request, ModelRequest)
    ids = [p.tool_call_id for p in response.parts if isinstance(p, ToolCallPart)]
    assert ids == ["agentq-1-0", "x", "agentq-1-2"]
    returned = [(p.tool_call_id, p.tool_name, p.content) for p in request.parts
                if isinstance(p, ToolReturnPart)]  # fmt: skip
    assert returned == [("agentq-1-0", "a", "1"), ("x", "b", "2"), ("agentq-1-2", "c", "3")]


def test_agents_a_durable_run_cannot_honour_are_refused() -> None:
    with_tool = pydantic_agent(Scripted())

    @with_tool.tool_plain
    def lookup(order_id: str) -> str:
        return order_id

    with pytest.raises(ConfigError, match=r"tools of its own .*lookup"):
        durable_agent(with_tool)

    with pytest.raises(ConfigError, match="output_type must be str"):
        durable_agent(pydantic_agent(Scripted(), output_type=Refund))
    unnamed = PydanticAgent(FunctionModel(Scripted()))
    with pytest.raises(ConfigError, match="needs a name"):
        durable_agent(unnamed)
    assert durable_agent(unnamed, name="other").name == "other"


def test_the_turn_client_sends_nothing_outside_a_turn() -> None:
    async def send() -> None:
        async with turn_http_client() as client:
            await client.get("http://127.0.0.1:9/")

    with pytest.raises(RuntimeError, match="only inside an agentq turn"):
        asyncio.run(send())


def test_an_openai_chat_model_sends_through_the_turns_client(tmp_path: Path) -> None:
    """Pydantic AI's OpenAIChatModel over real HTTP on loopback (agentq's
    ScriptedModel), its provider given turn_http_client(): each request carries
    the run, the turn and the turn task's Idempotency-Key, and a 429 with
    Retry-After reschedules the turn instead of failing it."""
    require("openai", "openai-agents")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from agentq.testing import ModelRequest as Asked
    from agentq.testing import Reply, ScriptedModel
    from tests.surfaces.conftest import worker_thread

    def script(request: Asked) -> Reply:
        if request.turn == 1:
            return Reply.tool_calls(("execute_refund", {"order_id": "o1", "amount": 40.0}),
                                    content="Refunding.")  # fmt: skip
        [(_call_id, result)] = request.last_tool_results()
        return Reply.text(f"done: {result}")

    with ScriptedModel(script) as server:
        server.fail_next(429, retry_after=1)
        provider = OpenAIProvider(base_url=server.base_url, api_key="test-key",
                                  http_client=turn_http_client())  # fmt: skip
        support = PydanticAgent(OpenAIChatModel("scripted", provider=provider),
                                instructions="You handle refunds.", name="support")  # fmt: skip
        agent = durable_agent(support, tools=["execute_refund"])
        with Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=[execute_refund],
                     agents=[agent]) as rt:  # fmt: skip
            run = rt.start_run("support", "refund order o1")
            with worker_thread(rt):
                run = rt.wait_run(run.run_id, timeout=60, until="done")
            first_turn = rt.task(run.turns[0].task_id)
        recorded = server.requests()
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == 'done: {"refunded": 40.0, "order_id": "o1"}'
    assert len(CHARGES) == 1
    assert server.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
    assert server.attempts_per_turn() == {(run.run_id, 1): 2, (run.run_id, 2): 1}
    assert first_turn.attempt == 2  # the 429 was agentq's to reschedule, not the SDK's
    assert [r.idempotency_key for r in recorded if r.status == 200] == [
        t.task_id for t in run.turns
    ]
    assert run.usage.total_tokens > 0 and run.turns[0].model == "scripted"


def test_the_turns_allow_list_holds_for_a_pydantic_ai_models_requests(tmp_path: Path) -> None:
    """A model whose request goes to a host the turn may not reach (here a
    function model calling out) sends nothing there; the run fails naming it."""
    from agentq.testing import LoopbackAPI

    with LoopbackAPI() as elsewhere:

        async def exfiltrate(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            async with turn_http_client() as client:
                await client.post(f"{elsewhere.url}/refunds", json={"order_id": "x", "amount": 1})
            return ModelResponse(parts=[TextPart("sent")])

        agent = durable_agent(PydanticAgent(FunctionModel(exfiltrate), name="leaky"))
        with Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=[execute_refund],
                     agents=[agent], clock=FakeClock()) as rt:  # fmt: skip
            run = rt.start_run("leaky", "hello")
            drain(rt)
            run = rt.run(run.run_id)
        assert elsewhere.applied() == []
    assert run.status is RunStatus.FAILED
    refused = "PolicyViolation: tool 'agent_turn_leaky' may not call host '127.0.0.1:"
    assert refused in str(run.error)


def test_a_request_the_provider_refuses_fails_the_run_without_retrying(tmp_path: Path) -> None:
    require("openai", "openai-agents")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from agentq.testing import ScriptedModel

    with ScriptedModel(api_key="the-right-key") as server:
        provider = OpenAIProvider(base_url=server.base_url, api_key="a-wrong-key",
                                  http_client=turn_http_client())  # fmt: skip
        support = PydanticAgent(OpenAIChatModel("scripted", provider=provider), name="support")
        with Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=[execute_refund],
                     agents=[durable_agent(support)], clock=FakeClock()) as rt:  # fmt: skip
            run = rt.start_run("support", "refund order o1")
            drain(rt)
            run = rt.run(run.run_id)
            (turn,) = [t for t in rt.tasks() if t.tool == "agent_turn_support"]
    assert turn.attempt == 1  # a 401 is not retried
    assert run.status is RunStatus.FAILED
    assert "PermanentError: model request refused" in str(run.error) and "401" in str(run.error)


def test_a_durable_agent_in_a_tools_folder_is_found_as_agentq_agents_are(tmp_path: Path) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "support.py").write_text('''
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from agentq.adapters.pydantic_ai_durable import durable_agent

support = Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("hi")])),
                name="support")
support_agent = durable_agent(support, tools=[])
''')
    with Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=folder, clock=FakeClock()) as rt:
        run = rt.start_run("support", "hello")
        drain(rt)
        run = rt.run(run.run_id)
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "hi")
