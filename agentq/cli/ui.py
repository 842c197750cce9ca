"""``agentq ui``: the web console (needs the ``ui`` extra).

Sign-in uses the HTTP API's tokens: ``--tokens FILE`` (the file of ``agentq
serve``, made with ``agentq token``), or ``--insecure-local`` (loopback only,
every user is ``local`` with every scope, no sign-in form); by default one
token is made for this run, ``$AGENTQ_UI_TOKEN`` if set (at least 16
characters) or a fresh one printed at start, acting as ``--user`` (default: the
login name) with ``--scope`` (default: admin), and a one-time sign-in link is
printed with it (:mod:`agentq.console.login_links`). ``--api`` also serves the
HTTP API in the same app. It listens on loopback unless ``--allow-remote`` is given.
"""

from __future__ import annotations

import argparse
import getpass
import os
from typing import Any

from agentq.cli.common import add_runtime_args, args_config, open_runtime, positive_float
from agentq.errors import ConfigError

__all__ = ["register"]

TOKEN_ENV = "AGENTQ_UI_TOKEN"
#: Shortest token accepted from $AGENTQ_UI_TOKEN.
MIN_TOKEN_CHARS = 16
_SCOPES = {"read": ("read",), "approve": ("read", "approve"), "operate": ("operate",),
           "admin": ("admin",)}  # fmt: skip


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def _auth(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """The authenticator, how to tell the user to sign in, and the principal a
    one-time sign-in link may sign in as (None with --tokens or --insecure-local)."""
    from agentq.server.auth import InsecureLocal, Principal, Scope, TokenAuth, new_token

    if args.tokens and args.insecure_local:
        raise ConfigError("give --tokens or --insecure-local, not both")
    if args.insecure_local:
        if args.allow_remote:
            raise ConfigError("--insecure-local serves loopback only: drop --allow-remote")
        told = "no sign-in: open it (--insecure-local: you are 'local', with every scope)"
        return InsecureLocal(), told, None
    if args.tokens:
        return TokenAuth.from_file(args.tokens), f"sign in with a token of {args.tokens}", None
    user = args.user or getpass.getuser()
    principal = Principal(user, frozenset(Scope(s) for s in _SCOPES[args.scope]))
    token = os.environ.get(TOKEN_ENV)
    if token is not None:
        if len(token.strip()) < MIN_TOKEN_CHARS:
            raise ConfigError(f"${TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters long")
        told = f"the token in ${TOKEN_ENV}"
    else:
        token = new_token()
        told = f"token {token}"
    auth = TokenAuth.from_tokens({token.strip(): principal})
    return auth, f"sign in with {told} (as {user}, {args.scope})", principal


def _cmd_ui(args: argparse.Namespace) -> int:
    # A missing module is reported by the CLI (extra="ui").
    from agentq.console import Console, create_app
    from agentq.console.login_links import LINK_TTL
    from agentq.console.serve import serve

    auth, told, principal = _auth(args)
    limits = args_config(args).servers  # [servers] of agentq.toml
    rt: Any = open_runtime(args, catalog=True)  # the console runs no tool code
    console = Console(rt, auth=auth, read_only=args.read_only, refresh_seconds=args.refresh)
    mode = " (read-only)" if args.read_only else ""
    api = " with the HTTP API at /v1/" if args.api else ""

    def ready(url: str) -> None:
        print(f"agentq console{mode} on {url}{api}", flush=True)
        print(told, flush=True)
        if principal is not None:
            # The one line the link's code is ever written to (it is not logged).
            minutes = round(LINK_TTL / 60)
            print(f"or open {url}login/link?code={console.links.mint(principal)} "
                  f"(signs in once, within {minutes} minutes)", flush=True)  # fmt: skip

    try:
        serve(
            create_app(console, api=args.api,
                       max_waits_per_principal=limits.max_waits_per_principal),
            host=args.host, port=args.port, allow_remote=args.allow_remote, ready=ready,
            limits=limits,
        )  # fmt: skip
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
    ui.add_argument("--tokens", help="the HTTP API's tokens file (see agentq token)")
    ui.add_argument("--insecure-local", action="store_true",
                    help="no tokens: everyone on loopback is 'local' with every scope")  # fmt: skip
    ui.add_argument("--user", help="without --tokens: who the run's token is (default: you)")
    ui.add_argument(
        "--scope", choices=sorted(_SCOPES), default="admin",
        help="without --tokens: what the run's token may do (default admin)",
    )  # fmt: skip
    ui.add_argument("--api", action="store_true", help="also serve the HTTP API (/v1/...)")
    ui.add_argument("--allow-remote", action="store_true", help="listen beyond loopback")
    ui.add_argument(
        "--refresh", type=positive_float, default=2.0, metavar="DURATION",
        help="time between live figures: seconds or a duration (250ms, 2s; default 2s)",
    )  # fmt: skip
    ui.set_defaults(func=_cmd_ui, extra="ui")
