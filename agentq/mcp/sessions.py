"""MCP sessions bound to the principal that opened them (streamable HTTP).

The MCP SDK keys a session by its ``Mcp-Session-Id`` alone: anyone who learns
an id (a log line, a proxy, a shared browser) could send requests on it or
``DELETE`` it. This middleware, behind authentication, records which principal
opened each session (the answer that carries a new id) and answers any request
of another principal on that id exactly as an unknown session: 404, nothing
forwarded. A ``DELETE`` by the owner forgets the binding.
"""

from __future__ import annotations

from collections import OrderedDict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentq.server.auth import Principal
from agentq.server.problems import Problem, problem_response

__all__ = ["SessionOwners"]

_HEADER = b"mcp-session-id"
#: Bindings kept at most (the oldest is dropped beyond: its session, if it still
#: lives, then answers 404 to everyone, which fails closed).
MAX_SESSIONS = 10_000


class SessionOwners:
    """ASGI middleware: a session id is usable only by the principal that opened it."""

    def __init__(self, app: ASGIApp, max_sessions: int = MAX_SESSIONS) -> None:
        self.app = app
        self.max_sessions = max_sessions
        self.owners: OrderedDict[str, Principal] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        session_id = _session_id(scope["headers"])
        if session_id is not None:
            owner = self.owners.get(session_id)
            if owner is None or owner != user:
                # Another principal's session, or one never opened here: as unknown.
                response = problem_response(Problem(404, "Session not found",
                                                    "no such MCP session"))  # fmt: skip
                await response(scope, receive, send)
                return
        deleting = scope["method"] == "DELETE"

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start" and isinstance(user, Principal):
                opened = _session_id(message.get("headers", []))
                if session_id is None and opened is not None:
                    self._bind(opened, user)
                elif deleting and session_id is not None and message["status"] < 300:
                    self.owners.pop(session_id, None)
            await send(message)

        await self.app(scope, receive, record)

    def _bind(self, session_id: str, principal: Principal) -> None:
        self.owners[session_id] = principal
        while len(self.owners) > self.max_sessions:
            self.owners.popitem(last=False)


def _session_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == _HEADER:
            return value.decode("latin-1")
    return None
