"""``agentq serve`` and ``agentq token``: the HTTP API's command line.

``agentq serve --tokens tokens.toml`` serves the API (uvicorn) on
127.0.0.1:8080; ``--host``/``--port`` move it, ``--worker N`` also runs a
worker with N handlers in the same process. ``--insecure-local`` serves
without tokens, for development, and only on a loopback address.
``/openapi.json`` and ``/docs`` are public unless ``--private-spec``.
``agentq token NAME --scope enqueue --scope read`` prints a new token and the
entry of the tokens file that admits it (only its digest). ``agentq openapi``
prints the OpenAPI document of the project's tools, offline.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

_INTERRUPTED = 130  # agentq.cli.exits.EXIT_INTERRUPTED (the CLI is a layer above)

__all__ = ["register"]

#: ``open_runtime(args, catalog=...)`` of :mod:`agentq.cli.common`.
RuntimeFactory = Callable[..., Any]


def register(
    subparsers: Any,
    add_runtime_args: Callable[[argparse.ArgumentParser], None],
    make_runtime: RuntimeFactory,
    span: Callable[[str], float] = float,
) -> None:
    """Add ``serve`` and ``token`` to the ``agentq`` parser. The CLI passes how
    it builds a runtime and reads a time span (this module sits below it and
    cannot import it)."""
    from agentq.errors import install_hint

    serve = subparsers.add_parser("serve", help=f"serve the HTTP API ({install_hint('http')})")
    add_runtime_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address (default %(default)s)")
    serve.add_argument("--port", type=int, default=8080, help="port (default %(default)s)")
    serve.add_argument("--tokens", help="tokens file (TOML; see agentq token)")
    serve.add_argument(
        "--insecure-local", action="store_true",
        help="no tokens: every loopback client may do everything (loopback only)",
    )  # fmt: skip
    serve.add_argument("--worker", type=int, default=0, metavar="N",
                       help="also run a worker with N handlers in this process")  # fmt: skip
    serve.add_argument("--max-wait", type=span, default=60.0,
                       help="longest Prefer: wait=N honoured, in seconds (default 60)")  # fmt: skip
    serve.add_argument("--private-spec", action="store_true",
                       help="/openapi.json and /docs need a token too (default: public, "
                            "they describe no data)")  # fmt: skip
    serve.set_defaults(func=lambda args: _cmd_serve(args, make_runtime), extra="http")

    spec = subparsers.add_parser(
        "openapi", help="print the HTTP API's OpenAPI document (offline: no server, no database)"
    )
    spec.add_argument("--config", help="agentq.toml (default: ./agentq.toml if there is one)")
    spec.add_argument("--tools", help="tools folder (default: agentq.toml, else ./tools)")
    spec.add_argument("--policies", help="policies folder (default: agentq.toml, else ./policies)")
    spec.set_defaults(func=lambda args: _cmd_openapi(args, make_runtime), extra="http")

    token = subparsers.add_parser("token", help="make a bearer token for the HTTP API")
    token.add_argument("name", help="the principal (recorded on its approvals)")
    token.add_argument("--scope", action="append", required=True,
                       choices=["read", "enqueue", "approve", "operate", "admin"],
                       help="what the token may do (repeatable)")  # fmt: skip
    token.add_argument("--append", metavar="FILE",
                       help="append the entry to this tokens file (created owner-only if "
                            "missing) and print only the token")  # fmt: skip
    token.set_defaults(func=_cmd_token, extra="http")  # hashing lives with the auth


def _cmd_token(args: argparse.Namespace) -> int:
    from agentq.server.auth import check_token_name, hash_token, new_token

    check_token_name(args.name)
    value = new_token()
    entry = (
        f"[[tokens]]\nname = {json.dumps(args.name)}\n"
        f"scopes = {json.dumps(sorted(set(args.scope)))}\n"
        f'sha256 = "{hash_token(value)}"\n'
    )
    if args.append:
        _append_entry(Path(args.append), entry)
        print(value)  # only the token: TOKEN=$(agentq token NAME --append FILE)
        print(f"appended {args.name!r} to {args.append}", file=sys.stderr)
        return 0
    print(f"token: {value}")
    print("# add to the tokens file (only the digest is stored), or use --append FILE:")
    print(entry, end="")
    return 0


def _append_entry(file: Path, entry: str) -> None:
    """Append a ``[[tokens]]`` entry, only if the file with it is a tokens file
    the server loads (checked on a copy, which then replaces the file), and never
    to one others may write (:func:`~agentq.server.auth.check_tokens_file`)."""
    import os
    import shutil
    import tempfile

    from agentq.errors import ConfigError
    from agentq.server.auth import TokenAuth, check_tokens_file

    try:
        check_tokens_file(file)
    except ConfigError as exc:
        raise ConfigError(f"cannot append: {exc}") from None
    old = file.read_text(encoding="utf-8") if file.exists() else ""
    text = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "") + entry
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp: owner-only
            out.write(text)
        if old:
            shutil.copymode(file, tmp)
        try:
            TokenAuth.from_file(tmp)
        except ConfigError as exc:  # said of the user's file, not of the copy
            raise ConfigError(f"cannot append: {str(exc).replace(tmp, str(file))}") from None
        os.replace(tmp, file)
    except BaseException:
        os.unlink(tmp)
        raise


def _cmd_openapi(args: argparse.Namespace, make_runtime: RuntimeFactory) -> int:
    """The document ``agentq serve`` would serve for these tools and policies,
    built over a throw-away in-memory database (the user's is not opened)."""
    from agentq.server.auth import InsecureLocal
    from agentq.server.state import ServerState

    args.db, args.setting = "sqlite:///:memory:", []
    rt = make_runtime(args)
    try:
        document = ServerState(rt, InsecureLocal()).openapi()
    finally:
        rt.close()
    print(json.dumps(document, indent=2))
    return 0


def _auth(args: argparse.Namespace) -> Any:
    from agentq.errors import ConfigError
    from agentq.server.auth import InsecureLocal, TokenAuth, is_loopback

    if args.insecure_local and args.tokens:
        raise ConfigError("give --tokens or --insecure-local, not both")
    if args.insecure_local:
        if not is_loopback(args.host):
            raise ConfigError(f"--insecure-local serves loopback only, not --host {args.host}")
        return InsecureLocal()
    if not args.tokens:
        raise ConfigError("the HTTP API needs --tokens FILE (or --insecure-local on loopback)")
    return TokenAuth.from_file(args.tokens)


def _cmd_serve(args: argparse.Namespace, make_runtime: RuntimeFactory) -> int:
    from agentq.errors import ConfigError

    if not 0 <= args.port < 65536:
        raise ConfigError(f"--port must be 0-65535 (0: any free port), got {args.port}")
    if not 0 < args.max_wait <= 3600:
        raise ConfigError(f"--max-wait must be in (0, 3600] seconds, got {args.max_wait}")
    from agentq.config import load_given_config

    auth = _auth(args)
    limits = load_given_config(args.config).servers  # [servers] of agentq.toml
    # Before the runtime opens; a missing module is reported by the CLI (extra="http").
    import uvicorn  # noqa: F401

    from agentq.server.app import create_app
    from agentq.server.listen import bind, run, url_of

    sock = bind(args.host, args.port)  # a busy port is an error before anything opens
    stop = threading.Event()
    worker_thread = None
    rt = None
    interrupted = False
    try:
        # Without a tools folder, the database's recorded tools; a worker runs their code.
        rt = make_runtime(args, catalog=args.worker == 0)
        app = create_app(rt, auth=auth, max_wait=args.max_wait, private_spec=args.private_spec,
                         max_waits_per_principal=limits.max_waits_per_principal)  # fmt: skip
        if args.worker > 0:
            worker = rt.worker(concurrency=args.worker)
            worker_thread = threading.Thread(target=worker.run, args=(stop,), name="agentq-worker")
            worker_thread.start()
        print(f"agentq serve: serving on {url_of(args.host, sock)}", file=sys.stderr, flush=True)
        run(app, sock, limits, lifespan="off", on_shutdown=app.state.agentq.closing.set)
    except KeyboardInterrupt:
        interrupted = True  # uvicorn stopped cleanly, then re-raised the SIGINT it caught
    finally:
        stop.set()
        if worker_thread is not None:
            worker_thread.join(60)
        sock.close()  # run() closed it already, unless something failed before
        if rt is not None:
            rt.close()
    how = " (Ctrl-C)" if interrupted else ""
    print(f"agentq serve: stopped{how}", file=sys.stderr, flush=True)
    return _INTERRUPTED if interrupted else 0
