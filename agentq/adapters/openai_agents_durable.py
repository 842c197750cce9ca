"""The OpenAI Agents SDK, durably: an ``agents.Agent`` as an agentq :class:`~agentq.Agent`.

::

    from agents import Agent, OpenAIChatCompletionsModel
    from openai import AsyncOpenAI
    from agentq.adapters.openai_agents_durable import durable_agent, turn_http_client

    client = AsyncOpenAI(base_url=..., api_key=..., http_client=turn_http_client())
    support = Agent(name="support", instructions="You handle refunds.",
                    model=OpenAIChatCompletionsModel("gpt-4o", openai_client=client))
    agent = durable_agent(support, tools=["execute_refund"])   # declared once, in every worker
    rt = Runtime(db, tools=[execute_refund], agents=[agent])
    run = rt.start_run("support", "refund order B7", idempotency_key="ticket-7")

Each turn of a run is a leased agentq task: a worker asks the SDK agent's model
once, through the SDK's public model interface (``Model.get_response``), and
commits the answer, the tool tasks it calls (keyed by run, turn and position,
never by the provider's call id) and the turn's ack in one transaction. A
worker that dies before that commit leaves the turn to be asked again; a
committed turn is never asked again, whoever starts the run again
(``start_run`` with the same ``idempotency_key``). The calls run as agentq
tasks, with their policies, approvals, retries and dead-letter queue.

**What a turn sends.** The agent's model (a ``Model``, or a name the SDK's
default provider resolves), its instructions (static or a function of the run
context, given ``context``), its ``prompt`` and its ``model_settings`` shape the
request as in ``Runner.run``; the input is the run's conversation as the SDK's
Responses-format items (:func:`to_input_items`); the tools offered are
agentq's (the agent's ``tools`` list) as ``FunctionTool`` s the SDK never
invokes. Differences from ``Runner.run``:

* the agent may not have tools, handoffs, MCP servers or guardrails of its own
  (they would run outside any task, or not at all): :func:`durable_agent`
  refuses it; declare tools with ``@agentq.tool``;
* the run's output is the model's text: ``output_type`` must be ``None`` or ``str``;
* a run's conversation is agentq's record: each answer's text and function
  calls are kept (reasoning and hosted-tool items are not sent back later);
* the SDK's own retries and tracing are not used: a failed request fails the
  turn's attempt, retried by agentq (``Retry-After`` honoured).

**Which client sends the request.** An ``AsyncOpenAI`` client given
:func:`turn_http_client` sends through the agentq client of the turn it is
used in: the policy's host allow-list for ``agent_turn_<name>`` plus the
model's own host, ``Idempotency-Key: <turn task id>``, the ``X-AgentQ-Run`` and
``X-AgentQ-Turn`` headers, and 429/503 with ``Retry-After`` turned into a retry
of the turn at that time (the client's own retries of it send nothing).

:func:`run_items` gives a run's conversation back as the SDK's input items
(for ``Runner.run`` or an :class:`~agentq.adapters.openai_agents_session.AgentQSession`).
The SDK is imported with this module (``agentq-runtime[openai-agents]``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
from agents import Agent as SDKAgent
from agents import FunctionTool, ModelSettings, RunContextWrapper
from agents.exceptions import UserError
from agents.items import ModelResponse, TResponseInputItem
from agents.models.interface import Model, ModelTracing
from agents.models.multi_provider import MultiProvider

from agentq.adapters.durable_turns import (
    CURRENT_TURN,
    AnswerCall,
    TurnCall,
    answer_calls,
    forward,
    host_entry,
    on_loop,
    text_of,
)
from agentq.agents import Agent, ModelAnswer, ToolCall
from agentq.errors import AgentQError, ConfigError
from agentq.redact import redact_text
from agentq.retry import PermanentError, RetryLater
from agentq.run_info import RunInfo

__all__ = [
    "OpenAIAgentsModel",
    "durable_agent",
    "run_items",
    "to_answer",
    "to_input_items",
    "turn_http_client",
]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")


def durable_agent(
    agent: SDKAgent[Any],
    *,
    name: str | None = None,
    tools: Sequence[str] | None = None,
    max_turns: int | None = 20,
    max_tokens: int | None = None,
    context: Any = None,
    queue: str = "agent_turns",
    timeout: float = 120.0,
    max_attempts: int = 5,
) -> Agent:
    """``agent`` as an agentq :class:`~agentq.Agent` named ``name`` (default: the
    SDK agent's ``name``, if it is a letter then letters, digits or ``_``),
    offering the agentq ``tools`` named (None: every visible tool of the
    runtime). ``max_turns`` and ``max_tokens`` are a run's budget; ``context``
    is the ``RunContextWrapper.context`` its instructions are given every turn;
    ``queue``, ``timeout`` (one model request) and ``max_attempts`` are the turn
    tasks'.

    Declare it where every worker loads it (``Runtime(..., agents=[...])`` or a
    tools module). Refused: an agent with tools, handoffs, MCP servers or
    guardrails of its own, or whose ``output_type`` is not ``None`` or ``str``."""
    label = name if name is not None else agent.name
    if not isinstance(label, str) or not _NAME.fullmatch(label):
        raise ConfigError(f"durable_agent needs a name of a letter, then letters, digits or _ "
                          f"(got {label!r}): durable_agent(agent, name=...); runs are "
                          "started by it")  # fmt: skip
    _refuse_own_parts(agent, label)
    model = OpenAIAgentsModel(agent, context=context, timeout=timeout)
    return Agent(name=label, model=model, tools=tools, max_turns=max_turns,
                 max_tokens=max_tokens, queue=queue, timeout=timeout,
                 max_attempts=max_attempts)  # fmt: skip


def _refuse_own_parts(agent: SDKAgent[Any], label: str) -> None:
    own = [f"tool {getattr(t, 'name', type(t).__name__)}" for t in agent.tools]
    own += [f"handoff {getattr(h, 'name', None) or getattr(h, 'agent_name', '?')}"
            for h in agent.handoffs]  # fmt: skip
    own += [f"MCP server {getattr(s, 'name', '?')}" for s in agent.mcp_servers]
    own += ["input guardrails"] if agent.input_guardrails else []
    own += ["output guardrails"] if agent.output_guardrails else []
    if own:
        raise ConfigError(
            f"OpenAI Agents SDK agent {label!r} has parts of its own ({', '.join(own)}) that "
            "would run outside any agentq task: in a durable run every tool call is an agentq "
            "task; declare tools with @agentq.tool and name them in durable_agent(..., tools=[...])"
        )
    if agent.output_type is not None and agent.output_type is not str:
        raise ConfigError(f"OpenAI Agents SDK agent {label!r}: a durable run's output is the "
                          f"model's text, so output_type must be None or str "
                          f"(got {agent.output_type!r})")  # fmt: skip


# --- the turn's model --------------------------------------------------------


@dataclass(eq=False)
class OpenAIAgentsModel:
    """A :class:`~agentq.agents.ChatModel` that asks an SDK agent's model once per
    turn, through ``Model.get_response`` (see the module's documentation). Made
    by :func:`durable_agent`."""

    agent: SDKAgent[Any]
    context: Any = None
    timeout: float = 120.0
    _resolved: Model | None = field(default=None, init=False, repr=False)

    @property
    def model(self) -> Model:
        """The agent's model (a name is resolved by the SDK's default provider at first use)."""
        if self._resolved is None:
            declared = self.agent.model
            self._resolved = (declared if isinstance(declared, Model)
                              else MultiProvider().get_model(declared))  # fmt: skip
        return self._resolved

    @property
    def host_entry(self) -> str:
        """The host of the model's client (its ``base_url``): what a
        :func:`turn_http_client` may reach ("" when it has none)."""
        try:
            client = getattr(self.model, "_client", None)
        except Exception:  # a model that cannot be resolved fails its turn, not this
            return ""
        base_url = getattr(client, "base_url", None)
        return host_entry(str(base_url)) if base_url is not None else ""

    def complete(
        self,
        http: httpx.Client,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        headers: Mapping[str, str],
    ) -> ModelAnswer:
        turn = TurnCall(http=http, headers=dict(headers))
        try:
            response = on_loop(self._ask(turn, messages, tools), self.timeout)
        except Exception as exc:
            classified = turn.refused if turn.refused is not None else _classified(exc)
            if classified is exc:
                raise
            raise classified from exc
        return to_answer(response, model=self._model_name())

    async def _ask(
        self,
        turn: TurnCall,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
    ) -> ModelResponse:
        CURRENT_TURN.set(turn)  # this task's own context: the requests it makes see it
        wrapper: RunContextWrapper[Any] = RunContextWrapper(context=self.context)
        system = await self.agent.get_system_prompt(wrapper)
        prompt = await self.agent.get_prompt(wrapper)
        settings = self.agent.model_settings or ModelSettings()
        return await self.model.get_response(
            system, to_input_items(messages), settings, [_function_tool(t) for t in tools],
            None, [], ModelTracing.DISABLED,
            previous_response_id=None, conversation_id=None, prompt=prompt,
        )  # fmt: skip

    def _model_name(self) -> str | None:
        name = getattr(self.model, "model", None)
        return name if isinstance(name, str) else None


async def _never_invoked(ctx: Any, arguments: str) -> str:
    raise RuntimeError("a durable agent's tools run as agentq tasks, never in the SDK")


def _function_tool(schema: Mapping[str, Any]) -> FunctionTool:
    function = schema.get("function") or {}
    return FunctionTool(
        name=str(function.get("name")),
        description=str(function.get("description") or ""),
        params_json_schema=dict(function.get("parameters") or {"type": "object"}),
        on_invoke_tool=_never_invoked,
        strict_json_schema=False,  # pydantic schemas with defaults are not strict-mode schemas
    )


def _classified(exc: Exception) -> Exception:
    """A failed model request as the task machinery reads it: a refused request
    (4xx) or a configuration mistake is permanent; a throttled one is retried
    when the provider said; anything else is retried with backoff."""
    if isinstance(exc, AgentQError):
        return exc
    if isinstance(exc, UserError):
        return PermanentError(redact_text(f"model request refused: {exc}"))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        after = _retry_after(exc.response.headers.get("retry-after"))
        if status in (429, 503) and after is not None:
            return RetryLater(after, f"model answered {status}")
        if 400 <= status < 500 and status not in (408, 409, 429):
            return PermanentError(redact_text(f"model request refused: {status} {exc.message}"))
        return RuntimeError(redact_text(f"model request failed: {status} {exc.message}"))
    if isinstance(exc, openai.APIError):
        return RuntimeError(redact_text(f"model request failed: {exc}"))
    return exc


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def to_answer(response: ModelResponse, *, model: str | None = None) -> ModelAnswer:
    """The SDK's ``ModelResponse`` as the turn's :class:`~agentq.agents.ModelAnswer`:
    its messages' text, its function calls (arguments as the model wrote them),
    its usage; other output items (reasoning, hosted tools) are not kept."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in response.output:
        kind = getattr(item, "type", None)
        if kind == "message":
            for part in getattr(item, "content", ()):
                text = getattr(part, "text", None) or getattr(part, "refusal", None)
                if isinstance(text, str):
                    texts.append(text)
        elif kind == "function_call":
            calls.append(ToolCall(
                call_id=str(getattr(item, "call_id", "") or ""),
                name=str(getattr(item, "name", "")),
                arguments=str(getattr(item, "arguments", "") or "{}"),
            ))  # fmt: skip
    usage = response.usage
    prompt, completion = int(usage.input_tokens or 0), int(usage.output_tokens or 0)
    return ModelAnswer(
        content="".join(texts) if texts else None,
        tool_calls=calls,
        usage={"prompt_tokens": prompt, "completion_tokens": completion,
               "total_tokens": prompt + completion},
        model=model,
    )  # fmt: skip


# --- the conversation ----------------------------------------------------------


def to_input_items(messages: Sequence[Mapping[str, Any]]) -> list[TResponseInputItem]:
    """A run's chat-completions messages (user, assistant, tool) as the SDK's
    Responses-format input items: user and system messages as messages, each
    answer as an assistant output message and its ``function_call`` items, and
    each tool message as the ``function_call_output`` of the call at its
    position (a call id missing or repeated within an answer is replaced, in the
    call and its output alike, by one naming the turn and position)."""
    out: list[TResponseInputItem] = []
    calls: list[AnswerCall] = []
    answered = returned = 0
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            answered += 1
            calls = answer_calls(message.get("tool_calls") or (), answered)
            returned = 0
            if message.get("content"):
                out.append({
                    "type": "message", "role": "assistant", "id": f"msg_agentq_{answered}",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text_of(message["content"]),
                                 "annotations": []}],
                })  # fmt: skip
            for call in calls:
                out.append({"type": "function_call", "call_id": call.call_id,
                            "name": call.name, "arguments": call.arguments})  # fmt: skip
        elif role == "tool":
            call_id = (calls[returned].call_id if returned < len(calls)
                       else str(message.get("tool_call_id") or ""))  # fmt: skip
            returned += 1
            out.append({"type": "function_call_output", "call_id": call_id,
                        "output": text_of(message.get("content"))})  # fmt: skip
        elif role == "system":
            out.append({"role": "system", "content": text_of(message.get("content"))})
        else:
            out.append({"role": "user", "content": text_of(message.get("content"))})
    return out


def run_items(run: RunInfo) -> list[TResponseInputItem]:
    """A durable run's conversation as the SDK's input items (``result.to_input_list()``
    would give them so): to go on with ``Runner.run`` or seed a ``Session``."""
    return to_input_items(run.messages)


# --- the OpenAI client's HTTP client ---------------------------------------------


def turn_http_client() -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` (``AsyncOpenAI(http_client=...)``) whose requests
    go through the agentq client of the turn they are made in: that turn's host
    allow-list, ``Idempotency-Key``, run and turn headers, and ``Retry-After``
    handling (a 429 or 503 reschedules the turn; the client's own retries of it
    send nothing). Outside a turn it sends nothing (an error says so)."""
    return httpx.AsyncClient(transport=_TurnTransport(), timeout=None)


class _TurnTransport(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        status, answer_headers, body = await forward(
            request.method, str(request.url), request.headers.multi_items(),
            await request.aread(), who="agentq.adapters.openai_agents_durable",
        )  # fmt: skip
        # The body as it came (still encoded), with its headers: the client decodes it.
        return httpx.Response(status, headers=answer_headers, stream=httpx.ByteStream(body))
