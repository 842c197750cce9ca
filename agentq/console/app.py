"""The console as a Starlette mount: configuration, who is asking, rendering.

:func:`console_mount` is the console as one Starlette ``Mount``: hand it to the
HTTP API's ``create_app(rt, auth=..., mounts=[...])`` to serve both in one app
with one authenticator, or let :func:`create_app` here serve the console alone.
Who may do what is the HTTP API's authentication (:mod:`agentq.server.auth`:
tokens, scopes, the principal); a browser exchanges a token for a session
cookie (:mod:`~agentq.console.sessions`). The pages and actions live in
:mod:`~agentq.console.pages` and :mod:`~agentq.console.actions`.
Every page goes out with a strict Content-Security-Policy (scripts only from
the console's own static files, no inline script), and templates are
autoescaped: task arguments are untrusted agent input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.authentication import AuthenticationError
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentq.approvals import ApprovalStatus
from agentq.console import panels, timefmt, views
from agentq.console.login_links import LoginLinks
from agentq.console.sessions import Session, SessionStore
from agentq.runtime import Runtime
from agentq.server import access
from agentq.server.auth import Authenticator, Principal, Scope, TooManyGuesses
from agentq.server.local import LocalOnly

__all__ = ["COOKIE", "Console", "Who", "console_mount", "create_app", "mount_console"]

#: Name of the session cookie.
COOKIE = "agentq_console"

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Who:
    """The principal behind a request, and its browser session (None for a bearer token)."""

    principal: Principal
    session: Session | None

    def can(self, scope: str) -> bool:
        """Whether the principal holds ``scope`` (``admin`` holds every scope)."""
        return self.principal.may(Scope(scope))


@dataclass
class Console:
    """One console over one runtime.

    ``auth`` is the HTTP API's authenticator (:class:`~agentq.server.auth.TokenAuth`,
    or :class:`~agentq.server.auth.InsecureLocal` on loopback); ``read_only`` refuses every
    action; ``refresh_seconds`` is how often the live queue figures are sent,
    ``stream_seconds`` how long one event stream lasts before the browser
    reconnects, and ``max_streams`` how many may be open at once (each reads the
    queue figures every ``refresh_seconds``; one more is told to retry later).
    """

    runtime: Runtime
    auth: Authenticator
    read_only: bool = False
    refresh_seconds: float = 2.0
    stream_seconds: float = 300.0
    max_streams: int = 50
    sessions: SessionStore = field(default_factory=SessionStore)
    #: One-time sign-in links (``agentq ui`` prints one): :mod:`~agentq.console.login_links`.
    links: LoginLinks = field(default_factory=LoginLinks)

    def __post_init__(self) -> None:
        if self.refresh_seconds <= 0 or self.stream_seconds <= 0 or self.max_streams < 1:
            raise ValueError("refresh_seconds, stream_seconds and max_streams must be positive")
        self.open_streams = 0  # changed on the event loop only
        self.templates = Environment(
            loader=PackageLoader("agentq.console", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
        )
        self.templates.globals["shown_args"] = views.compact
        timefmt.install(self.templates)
        panels.install(self.templates)

    # -- who is asking ----------------------------------------------------------

    async def who(self, request: Request) -> Who | None:
        """The principal of the request's bearer token, else of its session cookie.

        Only a request that *carries* a valid token is taken as its principal
        without a session: a browser never attaches one by itself, so such a
        request cannot be forged cross-site and needs no CSRF token. Not under a
        loopback-only authenticator (``InsecureLocal``): it takes *any* token, so
        there the session cookie and its CSRF token are the only way in (a page
        that rebound its name to 127.0.0.1 can set headers, not the cookie).
        """
        if "authorization" in request.headers and not self.auth.loopback_only:
            user = request.scope.get("user")  # set when mounted in the HTTP API's app
            if not isinstance(user, Principal):
                user = await self._authenticated(request)
            return Who(user, None) if user is not None else None
        session = self.sessions.get(request.cookies.get(COOKIE))
        return Who(session.principal, session) if session is not None else None

    async def _authenticated(self, conn: HTTPConnection) -> Principal | None:
        try:
            found = await self.auth.authenticate(conn)
        except AuthenticationError:
            return None
        user = found[1] if found is not None else None
        return user if isinstance(user, Principal) else None

    async def principal_for(self, token: str, request: Request) -> Principal | None:
        """Whose ``token`` is (typed into the login form), by the same authenticator,
        so a wrong one counts against the client's address as on the API, and
        :class:`~agentq.server.auth.TooManyGuesses` escapes while it is locked out."""
        token = token.strip()
        if not token or not token.isascii() or not token.isprintable():
            return None
        scope = {
            "type": "http",
            "headers": [(b"authorization", f"Bearer {token}".encode())],
            "client": request.scope.get("client"),
        }
        try:
            found = await self.auth.authenticate(HTTPConnection(scope))
        except TooManyGuesses:
            raise
        except AuthenticationError:
            return None
        user = found[1] if found is not None else None
        return user if isinstance(user, Principal) else None

    # -- responses --------------------------------------------------------------

    @staticmethod
    def url(request: Request, name: str, **params: Any) -> str:
        """The path of one of the console's routes."""
        return request.url_for(f"console:{name}", **params).path

    def cookie_path(self, request: Request) -> str:
        """The path the session cookie is limited to: the console's mount."""
        return self.url(request, "overview").rstrip("/") or "/"

    def render(
        self,
        request: Request,
        template: str,
        who: Who | None,
        status_code: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """A page, with the navigation's figures, flashed messages and strict headers."""
        flashes = self.sessions.take_flashes(who.session.session_id) if who and who.session else []
        open_approvals = 0
        if who is not None:
            waiting = (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED)
            # Only the open ones are read (their status is in the query), not every approval.
            found = self.runtime.approval_page(waiting).approvals
            open_approvals = len(access.visible_approvals(self.runtime, who.principal, found))
        # Relative times on the page are told from this moment (the runtime's clock).
        context.setdefault("now", self.runtime.clock.now())
        html = self.templates.get_template(template).render(
            request=request,
            who=who,
            csrf=who.session.csrf_token if who and who.session else "",
            read_only=self.read_only,
            flashes=flashes,
            open_approvals=open_approvals,
            url=lambda name, **p: self.url(request, name, **p),
            **context,
        )
        return HTMLResponse(html, status_code=status_code, headers=HEADERS)

    def message(
        self, request: Request, who: Who | None, status_code: int, text: str
    ) -> HTMLResponse:
        """A page that only says why a request was refused."""
        return self.render(request, "message.html", who, status_code, text=text)

    def to_login(self, request: Request) -> Response:
        """Send a browser without a session to the login page."""
        login = self.url(request, "login")
        return RedirectResponse(f"{login}?next={request.url.path}", status_code=303)

    # -- wiring -----------------------------------------------------------------

    def routes(self) -> list[Route | Mount]:
        """The console's routes, relative to where it is mounted."""
        from agentq.console import actions, login_links, pages

        static = StaticFiles(packages=[("agentq.console", "static")])
        return [
            *pages.routes(self),
            *actions.routes(self),
            *login_links.routes(self),
            Mount("/static", app=static, name="static"),
        ]


def console_mount(console: Console, *, path: str = "/console") -> Mount:
    """The console under ``path``, for ``agentq.server.create_app(..., mounts=[...])``
    (its routes are named ``console:...``)."""
    return Mount(path, routes=console.routes(), name="console")


def mount_console(app: Starlette, console: Console, *, path: str = "/console") -> None:
    """Serve ``console`` under ``path`` of an existing Starlette ``app``."""
    app.router.routes.append(console_mount(console, path=path))


async def _home(request: Request) -> Response:
    return RedirectResponse(request.url_for("console:overview").path, status_code=303)


def create_app(
    console: Console, *, path: str = "/console", api: bool = False,
    max_waits_per_principal: int = 100,
) -> Starlette:  # fmt: skip
    """An app serving the console (``agentq ui``), ``/`` leading to it; with
    ``api``, the HTTP API's app with the console mounted, behind the same auth
    (``max_waits_per_principal``: its cap on open long-polls and event streams)."""
    routes = [Route("/", _home), console_mount(console, path=path)]
    if api:
        from agentq.server.app import create_app as create_api

        # A read-only console serves a read-only API: no approve or cancel by /v1.
        return create_api(console.runtime, auth=console.auth, mounts=routes,
                          read_only=console.read_only,
                          max_waits_per_principal=max_waits_per_principal)  # fmt: skip
    # Loopback-only authentication admits every local client: not a web page's.
    middleware = [Middleware(LocalOnly)] if console.auth.loopback_only else []
    return Starlette(routes=routes, middleware=middleware)
