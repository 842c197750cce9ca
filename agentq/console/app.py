"""The console as a Starlette mount: configuration, who is asking, rendering.

:func:`mount_console` adds the console under a path of any Starlette app (the
HTTP API's, or the standalone one of :func:`create_app`); the pages and
actions live in :mod:`~agentq.console.pages` and :mod:`~agentq.console.actions`.
Every page goes out with a strict Content-Security-Policy (scripts only from
the console's own static files, no inline script), and templates are
autoescaped: task arguments are untrusted agent input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentq.approvals import ApprovalStatus
from agentq.console import views
from agentq.console.auth import Authenticator, Principal, Session, SessionStore, bearer_token
from agentq.runtime import Runtime

__all__ = ["COOKIE", "Console", "Who", "create_app", "mount_console"]

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


@dataclass
class Console:
    """One console over one runtime.

    ``authenticate`` maps a token to its principal (see
    :class:`~agentq.console.auth.TokenAuthenticator`); ``read_only`` refuses every
    action; ``refresh_seconds`` is how often the live queue figures are sent, and
    ``stream_seconds`` how long one event stream lasts before the browser reconnects.
    """

    runtime: Runtime
    authenticate: Authenticator
    read_only: bool = False
    refresh_seconds: float = 2.0
    stream_seconds: float = 300.0
    sessions: SessionStore = field(default_factory=SessionStore)

    def __post_init__(self) -> None:
        if self.refresh_seconds <= 0 or self.stream_seconds <= 0:
            raise ValueError("refresh_seconds and stream_seconds must be positive")
        self.templates = Environment(
            loader=PackageLoader("agentq.console", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
        )
        self.templates.globals["shown_args"] = views.compact

    # -- who is asking ----------------------------------------------------------

    def who(self, request: Request) -> Who | None:
        """The bearer token's principal, else the session cookie's, else None."""
        token = bearer_token(request.headers.get("authorization"))
        if token is not None:
            principal = self.authenticate(token)
            return Who(principal, None) if principal is not None else None
        session = self.sessions.get(request.cookies.get(COOKIE))
        return Who(session.principal, session) if session is not None else None

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
            open_approvals = sum(
                a.status in (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED)
                for a in self.runtime.approvals()
            )
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
        from agentq.console import actions, pages

        static = StaticFiles(packages=[("agentq.console", "static")])
        return [
            *pages.routes(self),
            *actions.routes(self),
            Mount("/static", app=static, name="static"),
        ]


def mount_console(app: Starlette, console: Console, *, path: str = "/console") -> None:
    """Serve ``console`` under ``path`` of ``app`` (routes named ``console:...``)."""
    app.router.routes.append(Mount(path, routes=console.routes(), name="console"))


def create_app(console: Console, *, path: str = "/console") -> Starlette:
    """A Starlette app serving only the console (``agentq ui``); ``/`` leads to it."""

    async def home(request: Request) -> Response:
        return RedirectResponse(request.url_for("console:overview").path, status_code=303)

    app = Starlette(routes=[Route("/", home)])
    mount_console(app, console, path=path)
    return app
