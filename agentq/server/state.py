"""What every route shares: :class:`ServerState` (from :func:`server_state`),
:class:`WaitSlots`, :class:`Releasing` and :func:`read_json`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentq import jsontext
from agentq.runtime import Runtime
from agentq.server.auth import Authenticator
from agentq.server.openapi import openapi_document
from agentq.server.problems import Problem

__all__ = [
    "MAX_BODY_BYTES",
    "WAIT_RETRY_SECONDS",
    "Releasing",
    "ServerState",
    "WaitSlots",
    "WithState",
    "read_json",
    "server_state",
]

#: The largest request body accepted (a task's envelope is at most 64 KiB).
MAX_BODY_BYTES = 256 * 1024
#: ``Retry-After`` of a wait refused because its principal has too many open.
WAIT_RETRY_SECONDS = 5
_STATE_KEY = "agentq.server"


class WaitSlots:
    """How many long-polls and event streams each principal has open, capped at
    ``per_principal`` (issue 27 item 10: nothing bounded how many waits one token
    could park). Used from the event loop's thread only."""

    def __init__(self, per_principal: int) -> None:
        self.per_principal = per_principal
        self._open: dict[str, int] = {}

    def open(self, principal: str) -> int:
        """How many ``principal`` has open now."""
        return self._open.get(principal, 0)

    def take(self, principal: str) -> Callable[[], None]:
        """A slot for one more wait of ``principal``, or the 429 problem; call the
        returned function (once or more: only the first counts) when it ends."""
        held = self._open.get(principal, 0)
        if held >= self.per_principal:
            raise Problem(
                429, "Too many waits",
                f"{principal!r} already has {held} long-polls and event streams open here "
                f"(at most {self.per_principal}); retry once one has ended",
                headers={"Retry-After": str(WAIT_RETRY_SECONDS)},
            )  # fmt: skip
        self._open[principal] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._open.get(principal, 1) - 1
            if left > 0:
                self._open[principal] = left
            else:
                self._open.pop(principal, None)

        return release


class Releasing(Response):
    """An answer that gives its wait slot back once it has been sent (or the
    client went away), however its stream ended (an event stream's)."""

    def __init__(self, answer: Response, release: Callable[[], None]) -> None:
        self._answer = answer
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._answer(scope, receive, send)
        finally:
            self._release()


@dataclass
class ServerState:
    """What the routes share: the runtime, the authenticator and limits."""

    runtime: Runtime
    auth: Authenticator
    #: The longest ``Prefer: wait=N`` honoured (seconds).
    max_wait: float = 60.0
    #: How long one server-sent event stream stays open at most (seconds).
    stream_seconds: float = 300.0
    #: ``/openapi.json`` and ``/docs`` need a token too (else they are public).
    private_spec: bool = False
    #: Open long-polls and event streams per principal (beyond: 429).
    max_waits_per_principal: int = 100
    #: Idempotency keys whose first request is being processed right now (409).
    in_flight: set[str] = field(default_factory=set)
    #: Set when the server starts to stop: parked long-polls answer at once.
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    _openapi: dict[str, Any] | None = None
    _openapi_version: tuple[tuple[str, int], ...] = ()
    waits: WaitSlots = field(init=False)

    def __post_init__(self) -> None:
        self.waits = WaitSlots(self.max_waits_per_principal)

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI document of the tools the runtime knows now (a runtime
        without tools reads the database's catalog, which a deploy may change:
        the document is made again when the tools differ)."""
        tools = self.runtime.known_tools()
        version = tuple(sorted((t.name, hash(t)) for t in tools))
        if self._openapi is None or self._openapi_version != version:
            policy = self.runtime.policy
            required = frozenset(t.name for t in tools
                                 if policy.for_tool(t.name).require_idempotency_key)  # fmt: skip
            self._openapi = openapi_document(self.runtime, tools, key_required=required)
            self._openapi_version = version
        return self._openapi


def server_state(conn: HTTPConnection) -> ServerState:
    """The app's :class:`ServerState`, from any request (mounted apps included)."""
    state = conn.scope.get(_STATE_KEY)
    if not isinstance(state, ServerState):
        raise RuntimeError("not a request of an agentq.server app")
    return state


class WithState:
    """Puts the server state into every request's ASGI scope."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope[_STATE_KEY] = self.state
        await self.app(scope, receive, send)


async def read_json(request: Request, *, optional: bool = False) -> Any:
    """The request's JSON body (413 too large, 415 not JSON, 400 unparsable)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise Problem(413, "Body too large", f"at most {MAX_BODY_BYTES} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise Problem(413, "Body too large", f"at most {MAX_BODY_BYTES} bytes")
    if optional and not body.strip():
        return {}
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json" and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise Problem(415, "Not JSON", "send Content-Type: application/json",
                      headers={"Accept-Post": "application/json"})  # fmt: skip
    try:
        return jsontext.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Problem(400, "Body is not JSON", str(exc)[:200],
                      errors=[{"pointer": "/", "detail": "not valid JSON"}]) from exc  # fmt: skip


