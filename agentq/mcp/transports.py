"""The MCP server's transports: stdio, and streamable HTTP behind bearer tokens.

On stdio the caller is whoever launched the process: the operator names it and
grants its scopes (``agentq mcp --principal ... --scope ...``). On HTTP the
HTTP API's authentication (:mod:`agentq.server.auth`) runs in front of the MCP
session: every request needs ``Authorization: Bearer <token>`` from the tokens
file, which names the principal and its scopes; anything else is a 401 before
the MCP SDK sees it. ``InsecureLocal`` (``--insecure-local``) serves loopback
clients only, without tokens, for development. A session is bound to the
principal that opened it (:mod:`agentq.mcp.sessions`): another token on its id
is a 404.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from agentq.config import ServerLimits
from agentq.errors import ConfigError
from agentq.mcp.server import PrincipalLookup, build_server
from agentq.mcp.sessions import SessionOwners
from agentq.runtime import Runtime
from agentq.server.auth import (
    Authenticator,
    InsecureLocal,
    Principal,
    TokenAuth,
    auth_failed,
    is_loopback,
)
from agentq.server.auth import Scope as AuthScope
from agentq.server.local import LocalOnly
from agentq.server.problems import Problem, problem_response

__all__ = ["http_app", "load_authenticator", "parse_scopes", "run_stdio", "serve_http"]


class _RequirePrincipal:
    """After authentication: a request without a principal (no token) is a 401."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not isinstance(scope.get("user"), Principal):
            response = problem_response(Problem(
                401, "Authentication required", "send Authorization: Bearer <token>",
                headers={"WWW-Authenticate": 'Bearer realm="agentq"'},
            ))  # fmt: skip
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _from_request(ctx: ServerRequestContext[Any, Any]) -> Principal | None:
    request = ctx.request
    found = getattr(request, "scope", {}).get("user") if request is not None else None
    return found if isinstance(found, Principal) else None


def http_app(
    rt: Runtime,
    auth: Authenticator,
    *,
    host: str = "127.0.0.1",
    wait_seconds: float = 1.0,
    path: str = "/mcp",
    max_waits_per_principal: int = 100,
) -> ASGIApp:
    """The streamable-HTTP ASGI app behind ``auth``; a loopback-only authenticator
    (``InsecureLocal``) is refused unless ``host`` is a loopback address.
    ``max_waits_per_principal`` caps the waits one principal parks at once."""
    if auth.loopback_only and not is_loopback(host):
        raise ConfigError(
            f"--insecure-local serves loopback only, not {host!r}: configure bearer tokens"
        )
    server = build_server(rt, _from_request, wait_seconds=wait_seconds,
                          max_waits_per_principal=max_waits_per_principal)  # fmt: skip
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    guarded = AuthenticationMiddleware(
        _RequirePrincipal(SessionOwners(app)), backend=auth, on_error=auth_failed
    )
    # As agentq serve and ui: a loopback-only authenticator serves no web page elsewhere.
    return LocalOnly(guarded) if auth.loopback_only else guarded


def serve_http(
    rt: Runtime,
    auth: Authenticator,
    *,
    host: str,
    port: int,
    wait_seconds: float = 1.0,
    path: str = "/mcp",
    limits: ServerLimits | None = None,
) -> None:
    """Serve streamable HTTP with uvicorn until interrupted, with ``limits``
    against slow and idle clients (:mod:`agentq.server.limits`); once the port
    is bound, tell the endpoint's URL (path included) on stderr."""
    import sys

    from agentq.server.listen import bind, run, url_of

    waits = limits.max_waits_per_principal if limits is not None else 100
    app = http_app(rt, auth, host=host, wait_seconds=wait_seconds, path=path,
                   max_waits_per_principal=waits)  # fmt: skip
    sock = bind(host, port)
    print(f"agentq mcp: serving on {url_of(host, sock, path)}", file=sys.stderr, flush=True)
    run(app, sock, limits)


def run_stdio(rt: Runtime, principal: Principal, *, wait_seconds: float = 1.0) -> None:
    """Serve one client over stdin/stdout until it disconnects."""
    import anyio
    from mcp.server.stdio import stdio_server

    lookup: PrincipalLookup = lambda _ctx: principal  # noqa: E731
    server = build_server(rt, lookup, wait_seconds=wait_seconds)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def parse_scopes(scopes: list[str]) -> frozenset[AuthScope]:
    """Scopes named on the command line, checked."""
    known = {s.value for s in AuthScope}
    unknown = sorted(set(scopes) - known)
    if unknown:
        raise ConfigError(
            f"unknown scope(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    return frozenset(AuthScope(s) for s in scopes)


def load_authenticator(tokens_file: str | None, insecure_local: bool, host: str) -> Authenticator:
    """The HTTP transport's authentication: the tokens file, or ``InsecureLocal``."""
    if insecure_local and tokens_file:
        raise ConfigError("give --tokens or --insecure-local, not both")
    if insecure_local:
        if not is_loopback(host):
            raise ConfigError(f"--insecure-local serves loopback only, not --host {host}")
        return InsecureLocal()
    if not tokens_file:
        raise ConfigError(
            "the MCP HTTP transport requires authentication: give --tokens FILE "
            "(or --insecure-local for loopback development)"
        )
    return TokenAuth.from_file(tokens_file)
