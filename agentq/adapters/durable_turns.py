"""What the durable adapters of agent frameworks share, with no framework imported.

A framework's agent becomes an agentq :class:`~agentq.Agent` through a
:class:`~agentq.agents.ChatModel` that asks the framework's model once per turn
(:mod:`agentq.adapters.pydantic_ai_durable`,
:mod:`agentq.adapters.openai_agents_durable`). They share:

* :func:`on_loop`: one event loop in a daemon thread for every async model
  request of the process (an SDK's async client is bound to the loop it first
  ran on, and turns run in the worker's handler threads);
* :class:`TurnCall` and :data:`CURRENT_TURN`: the agentq HTTP client and headers
  of the turn a request is made in, which a framework's HTTP client sends
  through (:func:`forward`), so the turn's host allow-list, ``Idempotency-Key``,
  run and turn headers and ``Retry-After`` hold for the SDK's requests too;
* :func:`host_entry`: the ``host[:port]`` of a model's ``base_url``;
* :func:`answer_calls`: an assistant message's tool calls with ids that are
  unique within the answer (a missing or repeated id is replaced, in the call
  and its result alike, by one naming the turn and position).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from agentq.agents.model import MAX_ANSWER_BYTES
from agentq.errors import AgentQError

__all__ = [
    "CURRENT_TURN",
    "TurnCall",
    "answer_calls",
    "forward",
    "host_entry",
    "on_loop",
    "text_of",
]

_T = TypeVar("_T")


# --- the loop the model requests run on -----------------------------------------

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentq-durable-turns",
                             daemon=True).start()  # fmt: skip
            _LOOP = loop
        return _LOOP


def on_loop(coro: Coroutine[Any, Any, _T], timeout: float) -> _T:
    """Run ``coro`` on the process's model-request loop and wait up to ``timeout``."""
    loop = _loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:  # waiting here would block the loop that must run it
        coro.close()
        raise RuntimeError("called from a model request of a durable agent's turn")
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise TimeoutError(f"model request took longer than {timeout:g}s") from None


# --- the turn's HTTP client ---------------------------------------------------------


@dataclass
class TurnCall:
    """What the model request of one turn sends through."""

    http: httpx.Client
    headers: Mapping[str, str]
    #: agentq's own refusal (RetryLater, a host not allowed) that the framework's
    #: SDK may wrap or retry: the turn raises it instead.
    refused: AgentQError | None = None


CURRENT_TURN: ContextVar[TurnCall | None] = ContextVar("agentq_durable_turn", default=None)
"""The turn the current model request is made in (set by a durable adapter's
model in the task that asks; None outside a turn)."""


async def forward(
    method: str, url: str, headers: Sequence[tuple[str, str]], content: bytes, *, who: str
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Send a framework client's request through the current turn's agentq client
    (the turn's headers replace the request's own of the same name); the answer's
    status, headers and raw (still encoded) body. Outside a turn nothing is sent;
    a request agentq refused once is refused again without sending (the SDK's
    retries of it)."""
    turn = CURRENT_TURN.get()
    if turn is None:
        raise RuntimeError(f"this client sends only inside an agentq turn of a durable "
                           f"agent ({who})")  # fmt: skip
    if turn.refused is not None:
        raise turn.refused
    ours = {h.lower() for h in turn.headers}
    kept = [(k, v) for k, v in headers if k.lower() not in ours]
    outgoing = httpx.Request(method, url, headers=[*kept, *turn.headers.items()], content=content)
    try:
        return await asyncio.to_thread(_send, turn.http, outgoing)
    except AgentQError as exc:
        turn.refused = exc
        raise


def _send(http: httpx.Client, request: httpx.Request) -> tuple[int, list[tuple[str, str]], bytes]:
    response = http.send(request, stream=True)
    try:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_raw():
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise RuntimeError(f"model answer over {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
    finally:
        response.close()
    return response.status_code, response.headers.multi_items(), b"".join(chunks)


def host_entry(base_url: str | None) -> str:
    """The ``host[:port]`` of an http(s) ``base_url`` ("" for none)."""
    parts = urlsplit(base_url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port}" if parts.port else host


# --- the conversation ------------------------------------------------------------


@dataclass(frozen=True)
class AnswerCall:
    """One tool call of a recorded answer: its (unique) id, tool and JSON arguments."""

    call_id: str
    name: str
    arguments: str


def answer_calls(raw: Sequence[Any], turn: int) -> list[AnswerCall]:
    """The ``tool_calls`` of an assistant message of answer ``turn``: a call id
    that is missing or repeated within the answer becomes ``agentq-<turn>-<position>``."""
    seen: set[str] = set()
    out = []
    for position, call in enumerate(raw):
        entry: Mapping[str, Any] = call if isinstance(call, Mapping) else {}
        named = entry.get("function")
        function: Mapping[str, Any] = named if isinstance(named, Mapping) else {}
        call_id = str(entry.get("id") or "")
        if not call_id or call_id in seen:
            call_id = f"agentq-{turn}-{position}"
        seen.add(call_id)
        arguments = function.get("arguments")
        out.append(AnswerCall(
            call_id=call_id, name=str(function.get("name") or ""),
            arguments=arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
        ))  # fmt: skip
    return out


def text_of(content: Any) -> str:
    """A message's content as text (JSON for anything else)."""
    return content if isinstance(content, str) else json.dumps(content, default=str)
