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

    Sessions end ``ttl`` seconds after sign-in; at most ``max_sessions`` are
    kept, the oldest dropped first, so signing in over and over cannot grow memory.
    """

    def __init__(
        self,
        *,
        ttl: float = 8 * 3600.0,
        max_sessions: int = 1000,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self._now = now
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
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
            while len(self._sessions) >= self.max_sessions:
                oldest = next(iter(self._sessions))
                self._sessions.pop(oldest)
                self._flashes.pop(oldest, None)
            self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of this id, or None (unknown or expired)."""
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires_at <= self._now():
                del self._sessions[session_id]
                self._flashes.pop(session_id, None)
                session = None
        return session

    def end(self, session_id: str | None) -> None:
        """Sign a session out (nothing happens for an unknown id)."""
        with self._lock:
            self._sessions.pop(session_id or "", None)
            self._flashes.pop(session_id or "", None)

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
