"""Browser sessions of the console, and their CSRF tokens.

Who a token belongs to is the HTTP API's business (:mod:`agentq.server.auth`:
bearer tokens with scopes, the principal); a browser signs in once with such a
token and is then known by an HttpOnly, SameSite=Strict session cookie whose id
is kept here, with a CSRF token that every form post of the session must carry.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentq.server.auth import Principal

__all__ = ["Session", "SessionStore"]


@dataclass(frozen=True)
class Session:
    """A signed-in browser: who, its CSRF token and when it ends (monotonic seconds)."""

    session_id: str
    principal: Principal
    csrf_token: str
    expires_at: float

    def csrf_ok(self, presented: str | None) -> bool:
        """Whether a form's CSRF token is this session's (compared in constant time)."""
        return bool(presented) and hmac.compare_digest(
            self.csrf_token.encode(), str(presented).encode()
        )


class SessionStore:
    """Browser sessions held in memory (a restart signs everyone out).

    Sessions end ``ttl`` seconds after sign-in. Each principal keeps at most
    ``per_principal`` sessions, its own oldest dropped first, so signing in over
    and over cannot grow memory, and one token signing in a thousand times signs
    out only its own earlier sessions, never another principal's. Past
    ``max_sessions`` in all (many principals), the oldest session of the
    principal with the most is dropped.
    """

    def __init__(
        self,
        *,
        ttl: float = 8 * 3600.0,
        max_sessions: int = 10_000,
        per_principal: int = 20,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_principal < 1 or max_sessions < 1:
            raise ValueError("per_principal and max_sessions must be at least 1")
        self.ttl = ttl
        self.max_sessions = max_sessions
        self.per_principal = per_principal
        self._now = now
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        # Each principal's session ids, oldest first.
        self._by_principal: dict[str, dict[str, None]] = {}
        self._flashes: dict[str, list[str]] = {}

    def start(self, principal: Principal) -> Session:
        """A new session for ``principal``."""
        session = Session(
            session_id=secrets.token_urlsafe(32),
            principal=principal,
            csrf_token=secrets.token_urlsafe(32),
            expires_at=self._now() + self.ttl,
        )
        with self._lock:
            own = self._by_principal.setdefault(principal.name, {})
            while len(own) >= self.per_principal:
                self._drop(next(iter(own)))
            while len(self._sessions) >= self.max_sessions:
                most = max(self._by_principal.values(), key=len)
                self._drop(next(iter(most)))
            self._sessions[session.session_id] = session
            self._by_principal.setdefault(principal.name, {})[session.session_id] = None
        return session

    def _drop(self, session_id: str) -> None:
        """Forget a session (the lock held)."""
        session = self._sessions.pop(session_id, None)
        self._flashes.pop(session_id, None)
        if session is None:
            return
        own = self._by_principal.get(session.principal.name)
        if own is not None:
            own.pop(session_id, None)
            if not own:
                del self._by_principal[session.principal.name]

    def count(self, principal: str | None = None) -> int:
        """Sessions kept now: ``principal``'s, or everyone's."""
        with self._lock:
            if principal is None:
                return len(self._sessions)
            return len(self._by_principal.get(principal, {}))

    def get(self, session_id: str | None) -> Session | None:
        """The live session of this id, or None (unknown or expired)."""
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires_at <= self._now():
                self._drop(session_id)
                session = None
        return session

    def end(self, session_id: str | None) -> None:
        """Sign a session out (nothing happens for an unknown id)."""
        with self._lock:
            self._drop(session_id or "")

    def flash(self, session_id: str, message: str) -> None:
        """Keep a message for the session's next page (at most a few are kept)."""
        with self._lock:
            if session_id in self._sessions:
                self._flashes.setdefault(session_id, []).append(message)
                del self._flashes[session_id][:-5]

    def take_flashes(self, session_id: str) -> list[str]:
        """The session's kept messages, forgotten once taken."""
        with self._lock:
            return self._flashes.pop(session_id, [])
