"""What a :class:`~agentq.scripted_model.ScriptedModel` answers, and OpenAI's wire shapes.

The value types a test scripts the model with (:class:`Reply`), reads requests
through (:class:`ModelRequest`) and counts with (:class:`RecordedRequest`), and
the functions that turn them into, and read them from, the JSON of OpenAI's
Chat Completions API. Kept apart from the HTTP server so that each stays small;
users import them from :mod:`agentq.testing`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agentq.redact import REDACTED, is_secret_name

__all__ = ["ModelRequest", "RecordedRequest", "Reply"]

#: The roles OpenAI accepts in ``messages`` (``developer`` is the newer ``system``).
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True)
class Reply:
    """One scripted answer: build it with :meth:`text`, :meth:`tool_calls` or :meth:`error`.

    ``calls`` holds ``(function name, arguments as JSON text)``; ``delay`` is how
    long the server waits before answering; ``usage`` overrides the estimated
    ``(prompt_tokens, completion_tokens)``.
    """

    content: str | None = None
    calls: tuple[tuple[str, str], ...] = ()
    status: int = 200
    retry_after: float | None = None
    message: str | None = None
    delay: float = 0.0
    usage: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.delay < 0:
            raise ValueError(f"a reply's delay cannot be negative, not {self.delay!r}")
        if self.status != 200 and not 400 <= self.status <= 599:
            raise ValueError(f"a reply's status is 200 or an error (4xx, 5xx), not {self.status}")

    @classmethod
    def text(
        cls, content: str, *, delay: float = 0.0, usage: tuple[int, int] | None = None
    ) -> Reply:
        """A plain answer (``finish_reason`` ``"stop"``)."""
        return cls(content=content, delay=delay, usage=usage)

    @classmethod
    def tool_calls(
        cls,
        *calls: tuple[str, Mapping[str, Any] | str],
        content: str | None = None,
        delay: float = 0.0,
        usage: tuple[int, int] | None = None,
    ) -> Reply:
        """An answer calling tools (``finish_reason`` ``"tool_calls"``): each call is
        ``(name, arguments)``, the arguments a mapping (sent as JSON text) or text
        sent as it is (a model's malformed JSON can be scripted so)."""
        if not calls:
            raise ValueError("Reply.tool_calls needs at least one (name, arguments) call")
        encoded = tuple(
            (name, arguments if isinstance(arguments, str) else json.dumps(dict(arguments)))
            for name, arguments in calls
        )
        return cls(content=content, calls=encoded, delay=delay, usage=usage)

    @classmethod
    def error(
        cls,
        status: int,
        *,
        retry_after: float | None = None,
        message: str | None = None,
        delay: float = 0.0,
    ) -> Reply:
        """An HTTP error in OpenAI's shape (429 with ``Retry-After: retry_after``, 500...)."""
        if not 400 <= status <= 599:
            raise ValueError(f"a scripted error is a 4xx or 5xx status, not {status}")
        return cls(status=status, retry_after=retry_after, message=message, delay=delay)

    def slow(self, seconds: float) -> Reply:
        """The same reply, answered after ``seconds``."""
        return replace(self, delay=seconds)


#: What the model answers past the end of a sequence script, or with no script.
DONE = Reply.text("done")


@dataclass(frozen=True)
class ModelRequest:
    """A chat-completions request as the script sees it.

    ``turn`` is 1 + the number of assistant messages in ``messages``, so the
    same conversation gets the same turn from any server. ``headers`` are
    lowercased, with credentials replaced by ``REDACTED``; ``run_id`` and
    ``run_turn`` come from ``X-AgentQ-Run`` and ``X-AgentQ-Turn`` (``run_turn``
    is ``turn`` without that header); ``body`` is the whole request.
    """

    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    model: str
    turn: int
    headers: Mapping[str, str]
    run_id: str | None
    run_turn: int
    idempotency_key: str | None
    body: Mapping[str, Any]

    def last_tool_results(self) -> list[tuple[str, str]]:
        """``(tool_call_id, content)`` of the tool messages after the last assistant message."""
        results: list[tuple[str, str]] = []
        for message in reversed(self.messages):
            if message["role"] == "assistant":
                break
            if message["role"] == "tool":
                results.append((str(message["tool_call_id"]), content_text(message)))
        return results[::-1]

    def last_user_text(self) -> str | None:
        """The text of the last user message, if there is one."""
        for message in reversed(self.messages):
            if message["role"] == "user":
                return content_text(message)
        return None

    def tool_names(self) -> list[str]:
        """The names of the functions offered in ``tools``."""
        return [str(tool["function"]["name"]) for tool in self.tools]


@dataclass(frozen=True)
class RecordedRequest:
    """One chat-completions request the script (or a fault) answered, for counting.

    ``status`` is the answer's; ``call_ids`` are the tool-call ids minted for it
    (fresh on every request); ``completion_id`` is its ``chatcmpl-`` id
    (``None`` for an error); ``at`` is when it arrived, on the server's clock.
    ``unsent`` is true when the server stopped while holding the answer back
    (a delay or stall), so the client got nothing.
    """

    run_id: str | None
    run_turn: int
    turn: int
    status: int
    call_ids: tuple[str, ...]
    completion_id: str | None
    idempotency_key: str | None
    at: datetime
    unsent: bool = False


class InvalidRequest(ValueError):
    """A request OpenAI would refuse with 400; the message says why."""


def content_text(message: Mapping[str, Any]) -> str:
    """A message's content as text: a string, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _message_chars(message: Mapping[str, Any]) -> int:
    calls = message.get("tool_calls") or []
    return len(content_text(message)) + sum(
        len(str(call.get("function", {}).get("name", "")))
        + len(str(call.get("function", {}).get("arguments", "")))
        for call in calls
        if isinstance(call, Mapping)
    )


def _tokens(chars: int) -> int:
    # About four characters a token, as OpenAI's rule of thumb; deterministic.
    return chars // 4 + 1


def parse_request(body: Any, headers: Mapping[str, str]) -> ModelRequest:
    """The :class:`ModelRequest` of a decoded JSON body; :class:`InvalidRequest` if
    it is no chat-completions request (``headers`` lowercased)."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("You must provide a model parameter.")
    if body.get("stream"):
        raise InvalidRequest("ScriptedModel does not stream: send 'stream': false.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise InvalidRequest(f"Invalid value for 'messages[{i}].role'.")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):  # fmt: skip
        raise InvalidRequest("'tools' must be an array of function tools with names.")
    problem = history_problem(messages)
    if problem is not None:
        raise InvalidRequest(problem)
    turn = 1 + sum(1 for m in messages if m["role"] == "assistant")
    run_turn = turn
    if "x-agentq-turn" in headers:
        try:
            run_turn = int(headers["x-agentq-turn"])
        except ValueError:
            raise InvalidRequest("X-AgentQ-Turn must be an integer.") from None
    return ModelRequest(
        messages=tuple(messages),
        tools=tuple(tools),
        model=model,
        turn=turn,
        headers={k: REDACTED if is_secret_name(k) else v for k, v in headers.items()},
        run_id=headers.get("x-agentq-run"),
        run_turn=run_turn,
        idempotency_key=headers.get("idempotency-key"),
        body=body,
    )


def history_problem(messages: list[dict[str, Any]]) -> str | None:
    """Why OpenAI would refuse this conversation's tool calls and results, if it would.

    Every tool message answers a call of the assistant message before it, and
    every call is answered before the next other message: a client that keeps
    the call ids of an answer it did not commit fails here, as on the real API.
    """
    pending: set[str] | None = None  # ids of the last assistant message's calls
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if pending is None or not isinstance(call_id, str) or call_id not in pending:
                return (
                    f"Invalid parameter: messages[{i}] with role 'tool' must be a response "
                    "to a preceding message with 'tool_calls'."
                )
            pending.discard(call_id)
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {', '.join(sorted(pending))}."
            )
        pending = None
        if role == "assistant" and message.get("tool_calls"):
            calls = message["tool_calls"]
            if not isinstance(calls, list) or not all(
                isinstance(c, dict) and isinstance(c.get("id"), str) for c in calls
            ):
                return f"Invalid value for 'messages[{i}].tool_calls'."
            pending = {c["id"] for c in calls}
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id'. Missing: {', '.join(sorted(pending))}."
        )
    return None


def completion_body(
    reply: Reply,
    request: ModelRequest,
    *,
    model: str,
    created: int,
    completion_id: str,
    call_ids: tuple[str, ...],
) -> dict[str, Any]:
    """A ``chat.completion`` object answering ``request`` with ``reply`` (a 200)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, (name, args) in zip(call_ids, reply.calls, strict=True)
        ]
    if reply.usage is not None:
        prompt, completion = reply.usage
    else:
        prompt = _tokens(sum(_message_chars(m) for m in request.messages))
        completion = _tokens(_message_chars(message))
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
