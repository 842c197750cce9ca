"""``agentq mcp``: serve the tools directory to MCP clients (stdio or streamable HTTP).

The argparse wiring only; the MCP SDK is imported by the handler, so
``agentq --help`` works without the ``agentq-runtime[mcp]`` extra.
"""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Callable
from typing import Any

from agentq.errors import ConfigError

__all__ = ["register"]


def register(
    subparsers: Any,
    add_runtime_args: Callable[[argparse.ArgumentParser], None],
    open_runtime: Callable[..., Any],
    span: Callable[[str], float] = float,
) -> None:
    """Add ``agentq mcp`` to the CLI (the CLI hands in how it opens a runtime:
    ``open_runtime(args, catalog=True)`` runs from the database's tool catalog
    where there is no tools folder, since the server runs no tool code)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "mcp", help="serve the tools as an MCP server (stdio or streamable HTTP)"
    )
    add_runtime_args(p)
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default: the client starts this process) or streamable HTTP")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default loopback)")
    # Not agentq ui's 8765, nor serve's 8080: the three run side by side.
    p.add_argument("--port", type=int, default=8766,
                   help="HTTP: port (default %(default)s; 0: any)")  # fmt: skip
    p.add_argument("--tokens", help="HTTP: tokens file (TOML, as for agentq serve)")
    p.add_argument("--insecure-local", action="store_true",
                   help="HTTP: no tokens, loopback only (development)")  # fmt: skip
    p.add_argument("--wait", type=span, default=1.0, metavar="DURATION",
                   help="seconds a tool call waits for its result before answering with "
                        "a task handle (default %(default)s)")  # fmt: skip
    p.add_argument("--principal", help="stdio: who the client is (default stdio:<user>)")
    p.add_argument("--scope", action="append",
                   choices=["read", "enqueue", "approve", "operate", "admin"],
                   help="stdio: a scope of the client (repeatable; default enqueue and read; "
                        "approve lets it decide approvals)")  # fmt: skip

    def run(args: argparse.Namespace) -> int:
        from agentq.mcp import transports
        from agentq.server.auth import Principal

        if args.transport == "stdio":
            if args.tokens or args.insecure_local:
                raise ConfigError("--tokens and --insecure-local are for --transport http")
            scopes = transports.parse_scopes(args.scope or ["enqueue", "read"])
            name = args.principal or f"stdio:{getpass.getuser()}"
            principal = Principal(name, scopes)
            rt = open_runtime(args, catalog=True)  # no tool code runs here
            try:
                transports.run_stdio(rt, principal, wait_seconds=args.wait)
            finally:
                rt.close()
            return 0
        from agentq.config import load_given_config

        auth = transports.load_authenticator(args.tokens, args.insecure_local, args.host)
        limits = load_given_config(args.config).servers  # [servers] of agentq.toml
        import uvicorn  # noqa: F401  (before the runtime opens: a missing extra is told first)

        rt = open_runtime(args, catalog=True)  # no tool code runs here
        try:
            transports.serve_http(
                rt, auth, host=args.host, port=args.port, wait_seconds=args.wait, limits=limits
            )
        finally:
            rt.close()
        return 0

    p.set_defaults(func=run, extra="mcp")  # the CLI reports its missing modules
