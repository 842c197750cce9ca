"""The MCP server's transports: stdio, and streamable HTTP behind bearer tokens.

On stdio the caller is whoever launched the process: the operator names it and
grants its scopes (``agentq mcp --principal ... --scope ...``). On HTTP every
request must carry ``Authorization: Bearer <token>``; the token names the
principal and its scopes, and a request without a valid one is answered 401
before it reaches the MCP session. ``insecure_local`` serves loopback only,
without tokens, for development.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mcp.server.context import ServerRequestContext
from starlette.types import ASGIApp, Receive, Scope, Send

from agentq.errors import ConfigError
from agentq.mcp.server import Principal, PrincipalLookup, build_server
from agentq.runtime import Runtime

__all__ = [
    "INSECURE_LOCAL",
    "Authenticate",
    "http_app",
    "is_loopback",
    "run_stdio",
    "serve_http",
    "static_tokens",
]

#: Who is recorded when ``--insecure-local`` serves without tokens.
INSECURE_LOCAL = Principal("insecure-local", frozenset({"admin"}))
#: Finds the principal a bearer token stands for (None: no such token).
Authenticate = Callable[[str], Principal | None]
_SCOPE_KEY = "agentq.principal"


def static_tokens(tokens: Mapping[str, Principal]) -> Authenticate:
    """An :data:`Authenticate` over a fixed table of tokens (compared in constant time)."""
    table = [(token.encode(), principal) for token, principal in tokens.items()]
    if any(len(token) < 16 for token, _ in table):
        raise ConfigError("bearer tokens must be at least 16 characters")

    def authenticate(token: str) -> Principal | None:
        found = None
        given = token.encode()
        for known, principal in table:  # no early exit: every token is compared
            if hmac.compare_digest(known, given):
                found = principal
        return found

    return authenticate


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _BearerAuth:
    """ASGI middleware: refuse any HTTP request without a valid bearer token, and
    hand the token's principal to the MCP handlers in the request scope."""

    def __init__(self, app: ASGIApp, authenticate: Authenticate) -> None:
        self.app = app
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        kind, _, token = header.partition(" ")
        principal = self.authenticate(token.strip()) if kind.lower() == "bearer" else None
        if principal is None:
            body = json.dumps({"error": "invalid_token", "error_description": "a valid bearer "
                               "token is required"}).encode()  # fmt: skip
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer error="invalid_token"'),
                (b"content-length", str(len(body)).encode()),
            ]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        await self.app({**scope, _SCOPE_KEY: principal}, receive, send)


class _FixedPrincipal:
    """Every HTTP request is this principal (``insecure_local`` only)."""

    def __init__(self, app: ASGIApp, principal: Principal) -> None:
        self.app, self.principal = app, principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, _SCOPE_KEY: self.principal}
        await self.app(scope, receive, send)


def _from_request(ctx: ServerRequestContext[Any, Any]) -> Principal | None:
    request = ctx.request
    found = getattr(request, "scope", {}).get(_SCOPE_KEY) if request is not None else None
    return found if isinstance(found, Principal) else None


def http_app(
    rt: Runtime,
    authenticate: Authenticate | None,
    *,
    host: str = "127.0.0.1",
    wait_seconds: float = 1.0,
    path: str = "/mcp",
) -> ASGIApp:
    """The streamable-HTTP ASGI app. ``authenticate=None`` is insecure-local mode,
    refused unless ``host`` is a loopback address."""
    if authenticate is None and not is_loopback(host):
        raise ConfigError(
            f"--insecure-local serves loopback only, not {host!r}: configure bearer tokens"
        )
    server = build_server(rt, _from_request, wait_seconds=wait_seconds)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    if authenticate is None:
        return _FixedPrincipal(app, INSECURE_LOCAL)
    return _BearerAuth(app, authenticate)


def serve_http(
    rt: Runtime,
    authenticate: Authenticate | None,
    *,
    host: str,
    port: int,
    wait_seconds: float = 1.0,
) -> None:
    """Serve streamable HTTP with uvicorn until interrupted."""
    import uvicorn

    app = http_app(rt, authenticate, host=host, wait_seconds=wait_seconds)
    uvicorn.run(app, host=host, port=port, log_level="warning")


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


def parse_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """Scopes named on the command line, checked."""
    known = {"enqueue", "read", "approve", "admin"}
    out = frozenset(s.strip() for s in scopes if s.strip())
    unknown = sorted(out - known)
    if unknown:
        names = ", ".join(sorted(known))
        raise ConfigError(f"unknown scope(s) {', '.join(unknown)} (known: {names})")
    return out


def load_authenticator(tokens_file: str | None, insecure_local: bool) -> Authenticate | None:
    """The bearer tokens of ``--tokens`` (None with ``--insecure-local``)."""
    if insecure_local and tokens_file:
        raise ConfigError("give --tokens or --insecure-local, not both")
    if insecure_local:
        return None
    if not tokens_file:
        raise ConfigError(
            "the HTTP transport requires authentication: give --tokens FILE "
            "(or --insecure-local for loopback development)"
        )
    raise ConfigError("--tokens is not supported yet")  # replaced by agentq.server.auth
