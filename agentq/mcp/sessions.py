"""MCP sessions bound to the principal that opened them (streamable HTTP), and
capped per principal.

The MCP SDK keys a session by its ``Mcp-Session-Id`` alone: anyone who learns
an id (a log line, a proxy, a shared browser) could send requests on it or
``DELETE`` it. This middleware, behind authentication, records which principal
opened each session (the answer that carries a new id) and answers any request
of another principal on that id exactly as an unknown session: 404, nothing
forwarded. A ``DELETE`` by the owner forgets the binding.

The SDK's sessions are one pool (10,000 by default): one token opening sessions
16 at a time filled it in about a minute, and every other principal's
``initialize`` was then a 503 until the idle timeout reaped them (issue 40 item
2). So each principal may hold at most ``max_per_principal`` sessions (opening
ones included); one more is a 429 with ``Retry-After`` (the seconds until its
oldest idle session expires), as the HTTP API's long-polls and the console's
sign-in are. A session counts until its owner deletes it, the SDK answers 404
for it (gone), or it has had no request in flight for ``idle_timeout`` seconds
(the SDK's own idle timeout, which this app sets to the same value: the SDK
reaps it first, this middleware a moment later, so a principal never holds more
than its cap).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentq.server.auth import Principal
from agentq.server.problems import Problem, problem_response

__all__ = ["DEFAULT_IDLE_TIMEOUT", "DEFAULT_PER_PRINCIPAL", "MAX_SESSIONS", "SessionOwners"]

_HEADER = b"mcp-session-id"
#: Bindings kept at most (the oldest is dropped beyond: its session, if it still
#: lives, then answers 404 to everyone, which fails closed).
MAX_SESSIONS = 10_000
#: Sessions one principal may hold at once (``[servers] mcp_sessions_per_principal``).
DEFAULT_PER_PRINCIPAL = 100
#: Seconds without a request in flight after which a session ends
#: (``[servers] mcp_session_idle_timeout``; the SDK's default is 30 minutes).
DEFAULT_IDLE_TIMEOUT = 300.0


@dataclass
class _Session:
    owner: Principal
    in_flight: int = 0
    last_active: float = 0.0


class SessionOwners:
    """ASGI middleware: a session id is usable only by the principal that opened
    it, and no principal holds more than ``max_per_principal`` sessions."""

    def __init__(
        self,
        app: ASGIApp,
        max_sessions: int = MAX_SESSIONS,
        *,
        max_per_principal: int = DEFAULT_PER_PRINCIPAL,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.max_sessions = max_sessions
        self.max_per_principal = max_per_principal
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        #: Per principal name: its sessions' ids, and its openings in progress.
        self._held: dict[str, set[str]] = {}
        self._opening: dict[str, int] = {}

    def held(self, principal: str) -> int:
        """How many sessions ``principal`` holds now (openings in progress included)."""
        self._expire(principal)
        return len(self._held.get(principal, ())) + self._opening.get(principal, 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        session_id = _session_id(scope["headers"])
        if session_id is not None:
            session = self.sessions.get(session_id)
            if session is None or session.owner != user:
                # Another principal's session, or one never opened here: as unknown.
                response = problem_response(Problem(404, "Session not found",
                                                    "no such MCP session"))  # fmt: skip
                await response(scope, receive, send)
                return
            await self._on_session(session_id, session, scope, receive, send)
            return
        if not isinstance(user, Principal):
            await self.app(scope, receive, send)
            return
        await self._opening_request(user, scope, receive, send)

    async def _on_session(
        self, session_id: str, session: _Session, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request of the owner on its session: counted in flight (a session
        with a request in flight never idles out)."""
        deleting = scope["method"] == "DELETE"

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                if status == 404 or (deleting and status < 300):
                    self._forget(session_id)  # the SDK no longer has it, or it ended
            await send(message)

        session.in_flight += 1
        try:
            await self.app(scope, receive, record)
        finally:
            session.in_flight -= 1
            session.last_active = self.clock()

    async def _opening_request(
        self, user: Principal, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request without a session id (one that opens a session): refused
        with 429 if ``user`` holds its share already."""
        name = user.name
        held = self.held(name)
        if held >= self.max_per_principal:
            wait = self._retry_after(name)
            response = problem_response(Problem(
                429, "Too many MCP sessions",
                f"{name!r} already has {held} MCP sessions open here (at most "
                f"{self.max_per_principal}); end one (DELETE) or retry once one has been "
                f"idle {self.idle_timeout:g} s",
                headers={"Retry-After": str(wait)},
            ))  # fmt: skip
            await response(scope, receive, send)
            return

        opened: str | None = None

        async def record(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = _session_id(message.get("headers", []))
                if opened is not None:  # a session now: no longer an opening
                    self._opened(name)
                    self._bind(opened, user)
            await send(message)

        self._opening[name] = self._opening.get(name, 0) + 1
        try:
            await self.app(scope, receive, record)
        finally:
            if opened is None:
                self._opened(name)
            elif opened in self.sessions:  # idle from the end of this request
                self.sessions[opened].last_active = self.clock()

    def _opened(self, principal: str) -> None:
        """One opening of ``principal`` ended (a session, or nothing)."""
        left = self._opening.get(principal, 1) - 1
        if left > 0:
            self._opening[principal] = left
        else:
            self._opening.pop(principal, None)

    def _retry_after(self, principal: str) -> int:
        """Seconds until the principal's first idle session expires."""
        now = self.clock()
        ends = [
            self.sessions[sid].last_active + self.idle_timeout - now
            for sid in self._held.get(principal, ())
            if self.sessions[sid].in_flight == 0
        ]
        # None idle (requests in flight, or openings): one idle timeout at least.
        return max(1, math.ceil(min(ends, default=self.idle_timeout)))

    def _expire(self, principal: str) -> None:
        """Forget ``principal``'s sessions idle for ``idle_timeout`` (the SDK has
        reaped them: it times out from the end of the last request as well)."""
        ids = self._held.get(principal)
        if not ids:
            return
        now = self.clock()
        for sid in list(ids):
            session = self.sessions[sid]
            if session.in_flight == 0 and now - session.last_active >= self.idle_timeout:
                self._forget(sid)

    def _bind(self, session_id: str, principal: Principal) -> None:
        self.sessions[session_id] = _Session(principal, last_active=self.clock())
        self._held.setdefault(principal.name, set()).add(session_id)
        while len(self.sessions) > self.max_sessions:
            self._forget(next(iter(self.sessions)))

    def _forget(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        ids = self._held.get(session.owner.name)
        if ids is not None:
            ids.discard(session_id)
            if not ids:
                del self._held[session.owner.name]


def _session_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == _HEADER:
            return value.decode("latin-1")
    return None
