"""The model a turn asks: any OpenAI-compatible chat-completions endpoint, over httpx.

:class:`OpenAICompatibleModel` speaks the Chat Completions wire format that
OpenAI, vLLM, Ollama, LiteLLM and most gateways serve, with the worker's own
HTTP client (the turn's host allow-list, ``Idempotency-Key: <turn task id>``,
429/503 with ``Retry-After`` turned into a retry of the turn at that time). No
SDK is needed. A model's answer is untrusted input: :func:`parse_answer` takes
only what the format defines and refuses anything else with a clear error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from agentq.errors import ConfigError
from agentq.retry import PermanentError

if TYPE_CHECKING:
    import httpx  # a worker's turn imports it; a process that only starts runs does not

__all__ = ["ChatModel", "ModelAnswer", "OpenAICompatibleModel", "ToolCall", "parse_answer"]

#: Longest answer body read from a model (a runaway or hostile server).
MAX_ANSWER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ToolCall:
    """One function call of a model's answer: the provider's id (used only to
    pair the result with it in the conversation), the tool and its JSON text."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelAnswer:
    """What a model answered: its text, its tool calls, and the tokens it reported."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None


class ChatModel(Protocol):
    """What a turn needs of a model: one request, one answer."""

    @property
    def host_entry(self) -> str:
        """The ``host:port`` the turn's client may connect to (its allow-list)."""
        ...

    def complete(
        self,
        http: httpx.Client,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        headers: Mapping[str, str],
    ) -> ModelAnswer:
        """Ask the model once; raise to fail the attempt (it is retried)."""
        ...


@dataclass(frozen=True)
class OpenAICompatibleModel:
    """A chat-completions endpoint: ``base_url`` (``https://api.openai.com/v1``,
    ``http://127.0.0.1:11434/v1``), the ``model`` name, and where its API key is:
    ``api_key_env`` (an environment variable, read by the worker at each call,
    never stored or logged). ``params`` are more request fields (temperature...)."""

    base_url: str
    model: str
    api_key_env: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"model base_url must be an http(s) URL with a host, got {self.base_url!r}"
            )
        if parts.username or parts.password:
            raise ConfigError("model base_url must not carry credentials: use api_key_env")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError("model needs a model name")
        reserved = {"model", "messages", "tools"} & set(self.params)
        if reserved:
            raise ConfigError(f"model params may not set {', '.join(sorted(reserved))}")

    @property
    def host_entry(self) -> str:
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{parts.port}" if parts.port else host

    def complete(
        self,
        http: httpx.Client,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        headers: Mapping[str, str],
    ) -> ModelAnswer:
        body: dict[str, Any] = {**self.params, "model": self.model, "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        sent = dict(headers)
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise PermanentError(f"model API key: environment variable "
                                     f"{self.api_key_env} is not set")  # fmt: skip
            sent["Authorization"] = f"Bearer {key}"
        url = self.base_url.rstrip("/") + "/chat/completions"
        response = http.post(url, json=body, headers=sent)
        return parse_answer(response)


def parse_answer(response: httpx.Response) -> ModelAnswer:
    """A chat-completions response as a :class:`ModelAnswer`. A 5xx fails the
    attempt (retried with backoff); another 4xx is permanent; a body that is not
    the format is an error naming what is wrong (retried: a proxy's hiccup)."""
    if response.status_code >= 500:
        raise RuntimeError(f"model endpoint failed with {response.status_code}")
    if response.status_code >= 400:
        raise PermanentError(f"model endpoint refused the request: {response.status_code} "
                             f"{_error_text(response)}")  # fmt: skip
    if len(response.content) > MAX_ANSWER_BYTES:
        raise RuntimeError(f"model answer over {MAX_ANSWER_BYTES} bytes")
    try:
        data = response.json()
        choice = data["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise RuntimeError(
            "model answer is not a chat completion (no choices[0].message)"
        ) from None
    if not isinstance(message, dict):
        raise RuntimeError("model answer's message is not an object")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content)
    calls = []
    for raw in message.get("tool_calls") or ():
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RuntimeError("model answer has a tool call without a function name")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append(ToolCall(str(raw.get("id") or ""), function["name"], arguments))
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    counts = {k: int(v) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
              if isinstance((v := usage.get(k)), int) and v >= 0}  # fmt: skip
    counts.setdefault("total_tokens", counts.get("prompt_tokens", 0)
                      + counts.get("completion_tokens", 0))  # fmt: skip
    model = data.get("model") if isinstance(data.get("model"), str) else None
    return ModelAnswer(content=content, tool_calls=calls, usage=counts, model=model)


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        text = error.get("message") if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        text = response.text
    return str(text)[:200]
