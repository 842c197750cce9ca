"""``agentq ui``: the web console (needs the ``ui`` extra).

It signs in with a token: ``$AGENTQ_UI_TOKEN`` if set (at least 16
characters), else a fresh random one printed at start. Whoever holds it acts
as ``--user`` (default: the login name) with ``--scope`` (default: admin).
The console listens on loopback unless ``--allow-remote`` is given.
"""

from __future__ import annotations

import argparse
import getpass
import os
from typing import Any

from agentq.cli.common import add_runtime_args, open_runtime, positive
from agentq.errors import ConfigError

__all__ = ["register"]

TOKEN_ENV = "AGENTQ_UI_TOKEN"


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def _cmd_ui(args: argparse.Namespace) -> int:
    try:
        from agentq.console import Console, Principal, TokenAuthenticator
        from agentq.console.auth import SCOPES
        from agentq.console.serve import is_loopback, serve
    except ImportError as exc:
        extra = "pip install 'agentq[ui]'"
        raise ConfigError(f"agentq ui needs the 'ui' extra: {extra} ({exc})") from None
    if not args.allow_remote and not is_loopback(args.host):
        raise ConfigError(f"refusing to serve the console on {args.host!r}: pass --allow-remote")
    scopes = frozenset(SCOPES[: SCOPES.index(args.scope) + 1])
    user = args.user or getpass.getuser()
    fixed = os.environ.get(TOKEN_ENV)
    if fixed is not None:
        authenticate = TokenAuthenticator({fixed: Principal(user, scopes)})
        told = f"the token in ${TOKEN_ENV}"
    else:
        token, authenticate = TokenAuthenticator.single(user, scopes)
        told = f"token {token}"
    rt: Any = open_runtime(args)
    console = Console(
        rt, authenticate=authenticate, read_only=args.read_only,
        refresh_seconds=args.refresh,
    )  # fmt: skip
    mode = " (read-only)" if args.read_only else ""

    def ready(url: str) -> None:
        print(f"agentq console{mode} on {url} as {user} ({args.scope})", flush=True)
        print(f"sign in with {told}", flush=True)

    try:
        serve(console, host=args.host, port=args.port, allow_remote=args.allow_remote, ready=ready)
    except KeyboardInterrupt:
        pass  # uvicorn stopped cleanly, then re-raised the SIGINT it caught
    finally:
        rt.close()
    print("agentq console stopped", flush=True)
    return 0


def register(sub: Any) -> None:
    """Add ``agentq ui``."""
    ui = sub.add_parser("ui", help="serve the web console (tasks, approvals, dead letters)")
    add_runtime_args(ui)
    ui.add_argument("--host", default="127.0.0.1", help="address (default %(default)s)")
    ui.add_argument("--port", type=_port, default=8765, help="port (default %(default)s; 0: any)")
    ui.add_argument("--read-only", action="store_true", help="refuse every action")
    ui.add_argument("--user", help="name actions are recorded under (default: your login name)")
    ui.add_argument(
        "--scope", choices=["read", "approve", "admin"], default="admin",
        help="what the token may do: read, approve (and read), admin (all; default)",
    )  # fmt: skip
    ui.add_argument("--allow-remote", action="store_true", help="listen beyond loopback")
    ui.add_argument(
        "--refresh", type=positive, default=2, help="seconds between live figures (default 2)"
    )
    ui.set_defaults(func=_cmd_ui)
