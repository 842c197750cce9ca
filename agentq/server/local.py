"""``--insecure-local`` serves the local machine only: its browser pages included.

:class:`~agentq.server.auth.InsecureLocal` admits every loopback client as
``local`` with every scope. That is ambient authority, like a cookie: a web
page the developer opens elsewhere could use it, cross-site (a form post, a
``no-cors`` fetch that needs no body), or by *DNS rebinding* (the page's own
name made to resolve to 127.0.0.1, so the browser deems the server same-origin
and sends the page's name as ``Host``). :class:`LocalOnly`, in front of every
app served that way (``agentq serve``, ``agentq ui``, ``agentq mcp --transport
http``), refuses:

* a ``Host`` that is no loopback name or address (``localhost``, 127.0.0.0/8,
  ``[::1]``): 421 Misdirected Request, as the MCP SDK answers;
* an ``Origin`` other than the server's own (scheme, host and port of the
  request; ``null`` included): 403;
* a request a browser marks ``Sec-Fetch-Site: cross-site`` or ``same-site``
  (another port of localhost is same-site): 403, unless it is the browser
  following a link (a GET navigation: it changes nothing, and the page that
  linked cannot read the answer).

A client that is no browser (curl, an SDK) sends no ``Origin`` or
``Sec-Fetch-Site`` and is served as before.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from agentq.server.auth import is_loopback
from agentq.server.problems import Problem, problem_response

__all__ = ["LocalOnly", "local_host"]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def local_host(host_header: str) -> bool:
    """Whether a ``Host`` header names this machine by a loopback name or address."""
    try:
        hostname = urlsplit(f"//{host_header}").hostname
    except ValueError:
        return False
    return is_loopback(hostname)


def _same_origin(origin: str, scheme: str, host_header: str) -> bool:
    """Whether ``origin`` is the request's own: same scheme, host and port."""
    try:
        theirs = urlsplit(origin)
        ours = urlsplit(f"{scheme}://{host_header}")
        their_port = theirs.port or _DEFAULT_PORTS.get(theirs.scheme)
        our_port = ours.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return False
    return (
        theirs.scheme == scheme
        and theirs.hostname is not None
        and theirs.hostname == ours.hostname
        and their_port == our_port
        and theirs.path in ("", "/")
    )


class LocalOnly:
    """ASGI middleware: refuses what could come from a web page elsewhere (see
    the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refused = self._refusal(scope)
        if refused is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await problem_response(refused)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _refusal(scope: Scope) -> Problem | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if not local_host(host):
            return Problem(
                421, "Misdirected request",
                "--insecure-local serves loopback names only (Host: localhost, 127.0.0.1 "
                "or [::1])",
            )  # fmt: skip
        origin = headers.get("origin")
        scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
        if origin is not None and not _same_origin(origin, scheme, host):
            return Problem(
                403, "Cross-origin request refused",
                "--insecure-local serves its own pages and clients that are no browser only",
            )  # fmt: skip
        navigation = (scope.get("method") in ("GET", "HEAD")
                      and headers.get("sec-fetch-mode", "").lower() == "navigate")  # fmt: skip
        site = headers.get("sec-fetch-site", "").lower()
        if site in ("cross-site", "same-site") and not navigation:
            return Problem(
                403, "Cross-site request refused",
                "--insecure-local serves its own pages and clients that are no browser only",
            )  # fmt: skip
        return None
