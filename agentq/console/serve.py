"""Serving the console with uvicorn (what ``agentq ui`` runs)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette

from agentq.config import ServerLimits
from agentq.errors import ConfigError
from agentq.server.auth import is_loopback
from agentq.server.listen import bind, run, url_of

__all__ = ["serve"]


def serve(
    app: Starlette,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_remote: bool = False,
    ready: Callable[[str], None] | None = None,
    limits: ServerLimits | None = None,
) -> None:
    """Serve ``app`` (from :func:`~agentq.console.app.create_app`) until SIGINT or
    SIGTERM. A host other than loopback needs ``allow_remote`` (put TLS in front
    of it: session cookies are marked Secure only on requests that came over HTTPS).
    ``ready`` is told the console's URL once the port is bound; ``limits`` are
    the servers' limits against slow and idle clients (:mod:`agentq.server.limits`)."""
    if not allow_remote and not is_loopback(host):
        raise ConfigError(f"refusing to serve the console on {host!r}: pass --allow-remote")
    # Bound here, so port 0 picks a free port and the address told is the real one.
    sock = bind(host, port)
    if ready is not None:
        ready(url_of(host, sock, "/console/"))
    # With --api the app is the HTTP API's: its parked long-polls answer at a stop.
    api = getattr(app.state, "agentq", None)
    closing = api.closing.set if api is not None else None
    run(app, sock, limits, access_log=False, on_shutdown=closing)  # shutdown_grace bounds it
