"""Signing in without typing a token: one-time links, and ``--insecure-local``.

``agentq ui`` prints, once, a link that signs the browser in as the run's
principal: ``/console/login/link?code=...``. The code is single use, expires
after :data:`LINK_TTL` seconds, is not the token (which stays out of URLs and
browser history), and is kept here only as its SHA-256. Following it starts a
session (:mod:`~agentq.console.sessions`) and redirects to the overview, so the
code leaves the address bar at once; the console logs no request lines.

Under ``--insecure-local`` (:class:`~agentq.server.auth.InsecureLocal`) every
loopback client is ``local`` anyway, so a page asked for without a session
starts one instead of showing the sign-in form. Only for a request addressed to
a loopback name (``Host: localhost``, ``127.0.0.1``, ``[::1]``): a page of
another site that rebinds its own name to 127.0.0.1 gets the sign-in form, not
a session. Forms still carry the session's CSRF token.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from agentq.console.sessions import Session
from agentq.server.auth import InsecureLocal, Principal

if TYPE_CHECKING:
    from agentq.console.app import Console

__all__ = ["LINK_TTL", "LoginLinks", "local_session", "routes", "set_session_cookie"]

#: Seconds a sign-in link stays valid.
LINK_TTL = 300.0
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


class LoginLinks:
    """Codes of one-time sign-in links, each good for one session of one principal.

    At most ``keep`` are outstanding (minting more forgets the oldest), so a
    loop that mints cannot grow memory.
    """

    def __init__(
        self, *, ttl: float = LINK_TTL, keep: int = 16, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.keep = keep
        self._now = now
        self._lock = threading.Lock()
        self._codes: dict[str, tuple[Principal, float]] = {}

    def mint(self, principal: Principal) -> str:
        """A new code that signs in as ``principal``, once, within ``ttl`` seconds."""
        code = secrets.token_urlsafe(32)
        with self._lock:
            while len(self._codes) >= self.keep:
                self._codes.pop(next(iter(self._codes)))
            self._codes[_digest(code)] = (principal, self._now() + self.ttl)
        return code

    def redeem(self, code: str) -> Principal | None:
        """The principal of ``code`` if it is valid, and the code is spent; else None
        (unknown, already used, or expired)."""
        if not code or len(code) > 200:
            return None
        with self._lock:
            found = self._codes.pop(_digest(code), None)
        if found is None or found[1] <= self._now():
            return None
        return found[0]


def set_session_cookie(
    console: Console, request: Request, response: Response, session: Session
) -> None:
    """Give the browser its session cookie (HttpOnly, SameSite=Strict, limited to
    the console's path; Secure when the request came over HTTPS)."""
    from agentq.console.app import COOKIE

    response.set_cookie(
        COOKIE, session.session_id, max_age=int(console.sessions.ttl),
        path=console.cookie_path(request), httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )  # fmt: skip


async def local_session(console: Console, request: Request) -> Session | None:
    """Under ``--insecure-local``, a new session for a loopback browser that asked
    a loopback name for a page; None otherwise (it signs in with the form)."""
    if not isinstance(console.auth, InsecureLocal):
        return None
    if (request.url.hostname or "") not in _LOOPBACK_NAMES:
        return None
    principal = await console.principal_for("insecure-local", request)
    return None if principal is None else console.sessions.start(principal)


def routes(console: Console) -> list[Route]:
    """The route that redeems a sign-in link."""

    async def follow(request: Request) -> Response:
        principal = console.links.redeem(request.query_params.get("code", ""))
        if principal is None:
            return console.message(
                request, None, 403,
                "this sign-in link was used already or has expired: sign in with the token",
            )  # fmt: skip
        session = console.sessions.start(principal)
        response = RedirectResponse(console.url(request, "overview"), status_code=303)
        set_session_cookie(console, request, response, session)
        return response

    return [Route("/login/link", follow, methods=["GET"], name="login_link")]
