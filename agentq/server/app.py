"""The ASGI app: :func:`create_app` builds the Starlette application.

::

    from agentq.server import Principal, Scope, TokenAuth, create_app

    auth = TokenAuth.from_tokens({"s3cret": Principal("bot", frozenset({Scope.ENQUEUE}))})
    app = create_app(rt, auth=auth)        # serve with uvicorn, or: agentq serve

Mount point for other surfaces (the web console): pass Starlette routes as
``mounts=[Mount("/console", app=console_app)]`` (or append to
``app.router.routes``). Everything mounted runs behind the same
authentication middleware, so in any handler:

* ``request.user`` is the :class:`~agentq.server.auth.Principal` (or
  Starlette's ``UnauthenticatedUser``);
* :func:`~agentq.server.auth.require` ``(request, Scope.APPROVE)`` returns the
  principal or raises the 401/403 problem;
* :func:`server_state` ``(request)`` is the :class:`ServerState` (the runtime,
  the authenticator), also inside mounted sub-applications.

Raise :class:`~agentq.server.problems.Problem` (or let an ``AgentQError``
escape) to answer with ``application/problem+json``. A mounted *Starlette
application* handles its own exceptions: give it
``exception_handlers=PROBLEM_HANDLERS`` (:mod:`agentq.server.problems`).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentq.errors import AgentQError, ConfigError
from agentq.runtime import Runtime
from agentq.server import actions, approvals, runs, tasks
from agentq.server import auth as auth_module
from agentq.server.local import LocalOnly
from agentq.server.problems import (
    Problem,
    handle_agentq_error,
    handle_problem,
    problem_response,
)
from agentq.server.state import ServerState, WithState, server_state

__all__ = ["ServerState", "create_app", "server_state"]

async def _openapi_json(request: Request) -> Response:
    state = server_state(request)
    if state.private_spec:
        auth_module.require(request, auth_module.Scope.READ)
    return JSONResponse(state.openapi())


async def _docs(request: Request) -> Response:
    from agentq.server.docs_page import render_docs

    state = server_state(request)
    if state.private_spec:
        auth_module.require(request, auth_module.Scope.READ)
    return HTMLResponse(render_docs(state.openapi()))


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    return problem_response(Problem(exc.status_code, str(exc.detail), headers=headers))


async def _unexpected(request: Request, exc: Exception) -> Response:
    return problem_response(Problem(500, "Internal error", type(exc).__name__))


class _ReadOnly:
    """Refuses every request to the API that is not a read (403 problem)."""

    _READS = frozenset({"GET", "HEAD", "OPTIONS"})

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if (scope["type"] == "http" and scope["method"] not in self._READS
                and (path == "/v1" or path.startswith("/v1/"))):  # fmt: skip
            response = problem_response(
                Problem(403, "Read-only", "this server is read-only: it changes nothing")
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(
    runtime: Runtime,
    *,
    auth: auth_module.Authenticator,
    mounts: Sequence[BaseRoute] = (),
    max_wait: float = 60.0,
    stream_seconds: float = 300.0,
    read_only: bool = False,
    private_spec: bool = False,
    max_waits_per_principal: int = 100,
) -> Starlette:
    """The HTTP API of ``runtime`` (routes in :mod:`agentq.server`'s docstring).

    ``auth`` is required: :class:`~agentq.server.auth.TokenAuth`, or
    :class:`~agentq.server.auth.InsecureLocal` for loopback development only.
    ``max_wait`` caps ``Prefer: wait=N``; ``stream_seconds`` how long one event
    stream stays open (the client reconnects after). ``read_only`` refuses every
    request to ``/v1`` that could change state (any method but GET, HEAD and
    OPTIONS) with 403, before routing: ``agentq ui --read-only --api``.
    ``/openapi.json`` and ``/docs`` describe the tools and the routes, no data,
    so they are served without a token (for client generators and first
    readers); ``private_spec`` puts them behind the ``read`` scope too
    (``agentq serve --private-spec``). Every other route needs a token.
    With a loopback-only ``auth`` (``InsecureLocal``) the app also refuses a
    ``Host`` that is no loopback name and a request from another origin
    (:class:`~agentq.server.local.LocalOnly`). ``max_waits_per_principal`` caps
    one principal's open long-polls and event streams (429 with ``Retry-After``
    beyond).
    """
    if not isinstance(auth, auth_module.Authenticator):
        raise ConfigError("create_app needs auth=TokenAuth(...) (or InsecureLocal() on loopback)")
    state = ServerState(runtime, auth, max_wait=max_wait, stream_seconds=stream_seconds,
                        private_spec=private_spec,
                        max_waits_per_principal=max_waits_per_principal)  # fmt: skip
    routes: list[BaseRoute] = [
        Route("/openapi.json", _openapi_json, methods=["GET"]),
        Route("/docs", _docs, methods=["GET"]),
        *actions.routes(),
        *tasks.routes(),
        *approvals.routes(),
        *runs.routes(),
        *mounts,
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            # Loopback-only authentication admits every local client: not a web page's.
            *([Middleware(LocalOnly)] if auth.loopback_only else []),
            Middleware(WithState, state=state),
            *([Middleware(_ReadOnly)] if read_only else []),
            Middleware(AuthenticationMiddleware, backend=auth, on_error=auth_module.auth_failed),
        ],
        exception_handlers={
            Problem: handle_problem,
            AgentQError: handle_agentq_error,
            HTTPException: _http_exception,
            Exception: _unexpected,
        },
    )
    app.state.agentq = state
    return app
