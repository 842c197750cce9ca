"""Pydantic AI, durably: a ``pydantic_ai.Agent`` as an agentq :class:`~agentq.Agent`.

::

    from pydantic_ai import Agent
    from agentq.adapters.pydantic_ai_durable import durable_agent

    support = Agent(model, instructions="You handle refunds.", name="support")
    agent = durable_agent(support, tools=["execute_refund"])   # declared once, in every worker
    rt = Runtime(db, tools=[execute_refund], agents=[agent])
    run = rt.start_run("support", "refund order B7", idempotency_key="ticket-7")

Each turn of a run is a leased agentq task: a worker asks the Pydantic AI agent's
model once and commits the answer, the tool tasks it calls (keyed by run, turn
and position, never by the provider's call id) and the turn's ack in one
transaction. A worker that dies before that commit leaves the turn to be asked
again; a committed turn is never asked again, whoever starts the run again
(``start_run`` with the same ``idempotency_key``). The model's calls run as
agentq tasks, with their policies, approvals, retries and dead-letter queue.

**How a turn asks the model.** Like Pydantic AI's own durable integrations
(Temporal, DBOS, Prefect), this keeps the agent's request assembly and makes
only the model request the durable unit: the turn drives ``agent.iter()`` over
the run's conversation (:func:`to_model_messages`) until the model has answered
once, and stops before Pydantic AI would run a tool. So the agent's model, its
``instructions`` (static or functions of the run context), its system prompts,
``model_settings``, capabilities and history processors shape the request as in
``agent.run()``; the tools offered are agentq's (the agent's ``tools`` list), as
an ``ExternalToolset``. Differences from ``agent.run()``:

* the agent may not have tools or toolsets of its own (they would run outside
  any task): :func:`durable_agent` refuses it; declare them as ``@agentq.tool``;
* the run's output is the model's text: ``output_type`` must be ``str``;
* a run's conversation is agentq's record, in the chat-completions shape: the
  text and the tool calls of each answer are kept, other parts (thinking,
  provider-side tool calls, files) are not sent back in later turns;
* ``deps`` are fixed when the agent is declared (every worker builds its own).

**Which client sends the request.** A turn's HTTP rules (the host allow-list of
the policy's ``[tools.agent_turn_<name>]`` plus the model's own host,
``Idempotency-Key: <turn task id>``, the ``X-AgentQ-Run`` and ``X-AgentQ-Turn``
headers, 429/503 with ``Retry-After`` turned into a retry of the turn at that
time) hold for agentq's own client. A Pydantic AI model sends through its
provider's client, which knows none of them, unless the provider is given
:func:`turn_http_client`, whose requests go through the client of the turn
they are made in::

    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=..., api_key=..., http_client=turn_http_client())
    support = Agent(OpenAIChatModel("gpt-4o", provider=provider), ...)

(any provider that takes an ``http_client``: an ``httpx2.AsyncClient``, the
client Pydantic AI's providers use). Such a client sends only inside a turn,
only to the model's host (its ``base_url``) and the hosts the policy allows the
turn; a 429 or 503 reschedules the turn at its ``Retry-After``, and the SDK's
own retries of a request agentq refused send nothing.

The model's answer is untrusted: a call of a tool the agent was not offered, or
with arguments that are not JSON or not the tool's, is refused by the durable
core and the model is told so. :func:`run_messages` gives a run's conversation
back as Pydantic AI messages (``ModelMessagesTypeAdapter`` serializes them).

Pydantic AI is imported with this module (``agentq-runtime[pydantic-ai]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelHTTPError,
    ModelRequestRejectedError,
    UserError,
)
from pydantic_ai.messages import ModelRequest, ModelResponse
from pydantic_ai.models import Model, infer_model
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset, FunctionToolset

from agentq.adapters.durable_turns import CURRENT_TURN, TurnCall, forward, host_entry, on_loop
from agentq.adapters.pydantic_ai_messages import run_messages, to_answer, to_model_messages
from agentq.agents import Agent, ModelAnswer
from agentq.agents.turn import RUN_HEADER
from agentq.errors import AgentQError, ConfigError
from agentq.redact import redact_text
from agentq.retry import PermanentError, RetryLater

__all__ = [
    "PydanticAIModel",
    "durable_agent",
    "run_messages",
    "to_answer",
    "to_model_messages",
    "turn_http_client",
]


def durable_agent(
    agent: PydanticAgent[Any, Any],
    *,
    name: str | None = None,
    tools: Sequence[str] | None = None,
    max_turns: int | None = 20,
    max_tokens: int | None = None,
    deps: Any = None,
    queue: str = "agent_turns",
    timeout: float = 120.0,
    max_attempts: int = 5,
) -> Agent:
    """``agent`` as an agentq :class:`~agentq.Agent` named ``name`` (default: the
    Pydantic AI agent's ``name``), offering the agentq ``tools`` named (None:
    every visible tool of the runtime). ``max_turns`` and ``max_tokens`` are a
    run's budget; ``deps`` is the ``RunContext.deps`` of every turn; ``queue``,
    ``timeout`` (one model request) and ``max_attempts`` are the turn tasks'.

    Declare it where every worker loads it (``Runtime(..., agents=[...])`` or a
    tools module). Refused: an agent without a model, with tools or toolsets of
    its own, or whose ``output_type`` is not ``str``."""
    label = name if name is not None else agent.name
    if not label:
        raise ConfigError("durable_agent needs a name: durable_agent(agent, name=...) or "
                          "Agent(..., name=...); runs are started by it")  # fmt: skip
    if agent.model is None:
        raise ConfigError(f"Pydantic AI agent {label!r} has no model: a durable run's "
                          "turns ask the model the agent was declared with")  # fmt: skip
    _refuse_own_tools(agent, label)
    _refuse_structured_output(agent, label)
    model = PydanticAIModel(agent, deps=deps, timeout=timeout)
    return Agent(name=label, model=model, tools=tools, max_turns=max_turns,
                 max_tokens=max_tokens, queue=queue, timeout=timeout,
                 max_attempts=max_attempts)  # fmt: skip


def _refuse_own_tools(agent: PydanticAgent[Any, Any], label: str) -> None:
    own: list[str] = []
    for toolset in agent.toolsets:
        if isinstance(toolset, FunctionToolset):
            own += list(toolset.tools)
        else:
            own.append(f"toolset {toolset.id or type(toolset).__name__}")
    if own:
        raise ConfigError(
            f"Pydantic AI agent {label!r} has tools of its own ({', '.join(own)}): in a "
            "durable run every tool call is an agentq task; declare them with @agentq.tool "
            "and name them in durable_agent(..., tools=[...])"
        )


def _refuse_structured_output(agent: PydanticAgent[Any, Any], label: str) -> None:
    spec = agent.output_type
    kinds = list(spec) if isinstance(spec, Sequence) and not isinstance(spec, str) else [spec]
    if not kinds or any(k is not str and k is not DeferredToolRequests for k in kinds):
        raise ConfigError(f"Pydantic AI agent {label!r}: a durable run's output is the "
                          f"model's text, so output_type must be str (got {spec!r})")  # fmt: skip


# --- the turn's model --------------------------------------------------------


@dataclass(eq=False)
class PydanticAIModel:
    """A :class:`~agentq.agents.ChatModel` that asks a Pydantic AI agent's model
    once per turn, through ``agent.iter()`` (see the module's documentation).
    Made by :func:`durable_agent`."""

    agent: PydanticAgent[Any, Any]
    deps: Any = None
    timeout: float = 120.0
    _resolved: Model | None = field(default=None, init=False, repr=False)

    @property
    def model(self) -> Model:
        """The agent's model (a model named by a string is resolved at first use)."""
        if self._resolved is None:
            declared = self.agent.model
            if declared is None:
                raise ConfigError("the Pydantic AI agent has no model")
            self._resolved = declared if isinstance(declared, Model) else infer_model(declared)
        return self._resolved

    @property
    def host_entry(self) -> str:
        """The model's host, from its ``base_url`` ("" for a model with none, such
        as a ``FunctionModel``): what a :func:`turn_http_client` may reach."""
        try:
            base_url = self.model.base_url
        except Exception:  # a model that cannot be resolved fails its turn, not this
            return ""
        return host_entry(base_url)

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
        return to_answer(response)

    async def _ask(
        self,
        turn: TurnCall,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
    ) -> ModelResponse:
        CURRENT_TURN.set(turn)  # this task's own context: the requests it makes see it
        history = to_model_messages(messages)
        system = await self.agent.system_prompt_parts(deps=self.deps, message_history=history)
        if system and history and isinstance(history[0], ModelRequest):
            history[0] = ModelRequest(parts=[*system, *history[0].parts])
        offered = ExternalToolset([_tool_definition(t) for t in tools], id="agentq")
        run_id = str(turn.headers.get(RUN_HEADER) or "") or None
        async with self.agent.iter(None, message_history=history, deps=self.deps,
                                   toolsets=[offered], conversation_id=run_id) as run:  # fmt: skip
            async for node in run:
                if PydanticAgent.is_call_tools_node(node):
                    # The model answered: stop before Pydantic AI would run a tool.
                    return node.model_response
                if PydanticAgent.is_end_node(node):
                    break
        raise RuntimeError("the Pydantic AI agent ended its run without asking the model")


def _tool_definition(schema: Mapping[str, Any]) -> ToolDefinition:
    function = schema.get("function") or {}
    return ToolDefinition(
        name=str(function.get("name")),
        description=function.get("description") or None,
        parameters_json_schema=dict(function.get("parameters") or {"type": "object"}),
    )


def _classified(exc: Exception) -> Exception:
    """A failed model request as the task machinery reads it: a rejected request
    or a configuration mistake is permanent; a throttled one is retried when the
    provider said; anything else is retried with backoff."""
    if isinstance(exc, AgentQError):
        return exc
    if isinstance(exc, ModelRequestRejectedError | UserError):
        return PermanentError(redact_text(f"model request refused: {exc}"))
    if isinstance(exc, ModelHTTPError) and exc.retry_after is not None:
        return RetryLater(exc.retry_after, f"model answered {exc.status_code}")
    if isinstance(exc, ModelAPIError):
        return RuntimeError(redact_text(f"model request failed: {exc}"))
    return exc


# --- the provider's HTTP client ---------------------------------------------------


def turn_http_client() -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` (the client Pydantic AI's providers take) whose
    requests go through the agentq client of the turn they are made in: that
    turn's host allow-list, ``Idempotency-Key``, run and turn headers, and
    ``Retry-After`` handling (a 429 or 503 reschedules the turn; the SDK's own
    retries of it send nothing). Outside a turn it sends nothing (an error says so)."""
    return httpx2.AsyncClient(transport=_TurnTransport(), timeout=None)


class _TurnTransport(httpx2.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        status, answer_headers, body = await forward(
            request.method, str(request.url), request.headers.multi_items(),
            await request.aread(), who="agentq.adapters.pydantic_ai_durable",
        )  # fmt: skip
        # The body as it came (still encoded), with its headers: the SDK's client decodes it.
        return httpx2.Response(status, headers=answer_headers, stream=httpx2.ByteStream(body))
