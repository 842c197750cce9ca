"""Who is using the console: bearer tokens, browser sessions and CSRF tokens.

A browser signs in once with a token (the login form posts it) and gets an
HttpOnly, SameSite=Strict session cookie; scripts may send the token as
``Authorization: Bearer`` instead. Every form post of a cookie session carries
the session's CSRF token; bearer requests need none (a browser never attaches
them by itself).

Scopes: ``read`` (every page), ``approve`` (approve and reject) and ``admin``
(cancel, replay and delete dead letters; it implies the other two).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "SCOPES",
    "Authenticator",
    "Principal",
    "Session",
    "SessionStore",
    "TokenAuthenticator",
    "bearer_token",
]

#: Every scope, weakest first.
SCOPES = ("read", "approve", "admin")


@dataclass(frozen=True)
class Principal:
    """An authenticated user: the name actions are recorded under, and its scopes."""

    name: str
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({"read"}))

    def can(self, scope: str) -> bool:
        """Whether this principal holds ``scope`` (``admin`` holds every scope)."""
        return scope in self.scopes or "admin" in self.scopes


#: Maps a presented token to its principal, or None when the token is unknown.
Authenticator = Callable[[str], "Principal | None"]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenAuthenticator:
    """An :data:`Authenticator` over a fixed set of tokens.

    Only the tokens' SHA-256 digests are kept, and every lookup compares all
    of them in constant time, so neither memory nor timing gives a token away.
    """

    def __init__(self, tokens: Mapping[str, Principal]) -> None:
        for token in tokens:
            if len(token) < 16:
                raise ValueError("a console token must be at least 16 characters long")
        self._principals = [(_digest(t), p) for t, p in tokens.items()]

    def __call__(self, token: str) -> Principal | None:
        presented = _digest(token)
        found = None
        for digest, principal in self._principals:
            if hmac.compare_digest(digest, presented):
                found = principal
        return found

    @classmethod
    def single(cls, name: str, scopes: Iterable[str] = SCOPES) -> tuple[str, TokenAuthenticator]:
        """A fresh random token for one user, and the authenticator that knows it."""
        token = secrets.token_urlsafe(32)
        return token, cls({token: Principal(name, frozenset(scopes))})


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


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
