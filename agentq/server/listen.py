"""Listening sockets for the HTTP surfaces (``agentq serve``, ``agentq mcp
--transport http``, ``agentq ui``).

The socket is bound here, before uvicorn starts, so that a port another process
holds is one :class:`~agentq.errors.ConfigError` (``agentq: error: ...``, exit 2)
instead of uvicorn's logged error and exit 3 (the CLI's "not found"), so that
port 0 picks a free port and the address told is the real one, and so that
nothing says "serving on" before the port is ours. :func:`run` serves with the
limits against slow and idle clients of :mod:`agentq.server.limits`.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentq.errors import ConfigError

if TYPE_CHECKING:
    from agentq.config import ServerLimits

__all__ = ["bind", "run", "url_of"]


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: any free port), or a
    :class:`ConfigError` naming the address and why it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why = "the address is already in use (another process listens there; try --port)"
        else:
            why = exc.strerror or str(exc)
        raise ConfigError(f"cannot listen on {_shown(host)}:{port}: {why}") from None


def url_of(host: str, sock: socket.socket, path: str = "") -> str:
    """``http://host:port/path`` of a bound socket (its real port)."""
    return f"http://{_shown(host)}:{sock.getsockname()[1]}{path}"


def run(
    app: Any,
    sock: socket.socket,
    limits: ServerLimits | None = None,
    *,
    on_shutdown: Callable[[], None] | None = None,
    **config: Any,
) -> None:
    """Serve ``app`` with uvicorn on the bound ``sock`` until SIGINT/SIGTERM, with
    ``limits`` (default: :class:`~agentq.config.ServerLimits`' defaults) against
    slow and idle clients; ``config`` goes to :class:`uvicorn.Config` (quiet by
    default). ``on_shutdown`` is called on the event loop when the server starts
    to stop, before it waits (``shutdown_grace`` seconds at most) for the
    requests in progress: the HTTP API answers its parked long-polls then."""
    import uvicorn

    from agentq.config import ServerLimits
    from agentq.server.limits import BodyDeadline, uvicorn_options

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if on_shutdown is not None:
                on_shutdown()
            await super().shutdown(sockets)

    limits = limits if limits is not None else ServerLimits()
    config.setdefault("log_level", "warning")
    options = {**uvicorn_options(limits), **config}
    server = Server(uvicorn.Config(BodyDeadline(app, limits.body_timeout), **options))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host
