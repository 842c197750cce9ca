"""Serving the console with uvicorn (what ``agentq ui`` runs)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

from agentq.console.app import Console, create_app
from agentq.errors import ConfigError

__all__ = ["is_loopback", "serve"]

#: Seconds uvicorn waits for open event streams when asked to stop.
GRACE_SECONDS = 3


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    console: Console,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_remote: bool = False,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``console`` until SIGINT/SIGTERM. A host other than loopback needs
    ``allow_remote`` (put TLS in front of it: session cookies are then marked
    Secure only when the request came over HTTPS)."""
    import uvicorn

    if not allow_remote and not is_loopback(host):
        raise ConfigError(f"refusing to serve the console on {host!r}: pass --allow-remote")
    # Bound here, so port 0 picks a free port and the address told is the real one.
    sock = socket.create_server((host, port))
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(console), log_level="warning", timeout_graceful_shutdown=GRACE_SECONDS,
        access_log=False,
    )  # fmt: skip
    server = uvicorn.Server(config)
    if ready is not None:
        shown = f"[{host}]" if ":" in host else host
        ready(f"http://{shown}:{bound}/console/")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
