"""A durable run's conversation as Pydantic AI messages, and a Pydantic AI
answer as a turn's.

:func:`to_model_messages` is what each turn of a
:func:`~agentq.adapters.pydantic_ai_durable.durable_agent` hands ``agent.iter()``
(the run's chat-completions messages: the text and tool calls of each answer,
the tools' returns); :func:`to_answer` what the turn makes of the model's
response; :func:`run_messages` a run's conversation back, as
``result.all_messages()`` would give it (``ModelMessagesTypeAdapter`` serializes
it). :mod:`agentq.adapters.pydantic_ai_durable` re-exports them.

Pydantic AI is imported with this module (``agentq-runtime[pydantic-ai]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from agentq.adapters.durable_turns import answer_calls, on_loop, text_of
from agentq.agents import ModelAnswer, ToolCall
from agentq.run_info import RunInfo

__all__ = ["run_messages", "to_answer", "to_model_messages"]


def to_model_messages(
    messages: Sequence[Mapping[str, Any]], turns: Sequence[Any] = ()
) -> list[ModelMessage]:
    """A run's chat-completions messages (user, assistant, tool) as Pydantic AI
    messages: consecutive user and tool messages make one ``ModelRequest``; each
    assistant message a ``ModelResponse`` with its ``ToolCallPart``\\ s, and each
    tool message the ``ToolReturnPart`` of the call at its position (a call id
    that is missing or repeated within an answer is replaced, in the call and
    its return alike, by one that names the turn and position). ``turns`` (a
    run's :class:`~agentq.run_info.TurnInfo`) add each answer's usage, model and
    time."""
    out: list[ModelMessage] = []
    request: list[ModelRequestPart] = []
    calls: list[ToolCallPart] = []  # the last answer's calls, paired with what follows
    answered = 0
    returned = 0
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            if request:
                out.append(ModelRequest(parts=request))
                request = []
            turn = turns[answered] if answered < len(turns) else None
            answered += 1
            calls = _calls(message.get("tool_calls") or (), answered)
            returned = 0
            out.append(_response(message, calls, turn))
        elif role == "tool":
            call = calls[returned] if returned < len(calls) else None
            returned += 1
            request.append(ToolReturnPart(
                tool_name=call.tool_name if call else "unknown",
                content=_text(message.get("content")),
                tool_call_id=call.tool_call_id if call else str(message.get("tool_call_id") or ""),
            ))  # fmt: skip
        elif role == "system":
            request.append(SystemPromptPart(_text(message.get("content"))))
        else:
            request.append(UserPromptPart(_text(message.get("content"))))
    if request:
        out.append(ModelRequest(parts=request))
    return out


def _calls(raw: Sequence[Any], turn: int) -> list[ToolCallPart]:
    return [ToolCallPart(tool_name=c.name, args=c.arguments, tool_call_id=c.call_id)
            for c in answer_calls(raw, turn)]  # fmt: skip


def _response(message: Mapping[str, Any], calls: list[ToolCallPart], turn: Any) -> ModelResponse:
    parts: list[ModelResponsePart] = []
    if message.get("content"):
        parts.append(TextPart(_text(message["content"])))
    parts.extend(calls)
    if turn is None:
        return ModelResponse(parts=parts)
    usage = RequestUsage(input_tokens=turn.usage.prompt_tokens,
                         output_tokens=turn.usage.completion_tokens)  # fmt: skip
    when: datetime | None = turn.finished_at
    if when is None:
        return ModelResponse(parts=parts, usage=usage, model_name=turn.model)
    return ModelResponse(parts=parts, usage=usage, model_name=turn.model, timestamp=when)


_text = text_of


def run_messages(
    run: RunInfo, agent: PydanticAgent[Any, Any] | None = None, *, deps: Any = None
) -> list[ModelMessage]:
    """A run's conversation as Pydantic AI messages, as ``result.all_messages()``
    would give it (``ModelMessagesTypeAdapter`` serializes them): with ``agent``
    (and its ``deps``), the first request starts with the agent's system prompts,
    as each turn's request did."""
    history = to_model_messages(run.messages, run.turns)
    if agent is not None and history and isinstance(history[0], ModelRequest):
        system = on_loop(agent.system_prompt_parts(deps=deps, message_history=history), 60.0)
        history[0] = ModelRequest(parts=[*system, *history[0].parts])
    return history


def to_answer(response: ModelResponse) -> ModelAnswer:
    """A Pydantic AI ``ModelResponse`` as the turn's :class:`~agentq.agents.ModelAnswer`:
    its text, its function calls (arguments as the model wrote them), its usage."""
    calls = [
        ToolCall(call_id=p.tool_call_id, name=p.tool_name,
                 arguments=p.args if isinstance(p.args, str) else p.args_as_json_str())
        for p in response.parts if type(p) is ToolCallPart
    ]  # fmt: skip
    usage = response.usage
    prompt, completion = int(usage.input_tokens or 0), int(usage.output_tokens or 0)
    return ModelAnswer(
        content=response.text,
        tool_calls=calls,
        usage={"prompt_tokens": prompt, "completion_tokens": completion,
               "total_tokens": prompt + completion},
        model=response.model_name,
    )  # fmt: skip
