"""What the subcommands share: the runtime arguments, finding the project, and
opening the runtime a command works on (the argument types are
:mod:`agentq.cli.arg_types`', re-exported here).

A project is found only where the user says: ``--tools`` / ``--policies``,
else ``agentq.toml`` (``--config``, else ``./agentq.toml`` if present; every
path in it is relative to the file), else ``./tools`` and ``./policies`` in
the current folder. Never beside the installed package. A missing
``policies/`` means the default policy (no hosts allowed, no approvals).

Read-only commands open a database only if it exists: a mistyped ``--db``
is an error, not a new empty file.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from agentq.cli.arg_types import (
    int_in,
    moment,
    non_negative,
    non_negative_span,
    positive,
    positive_float,
    read_args,
    time_or_ago,
)
from agentq.errors import ConfigError

if TYPE_CHECKING:
    from agentq.config import Config
    from agentq.runtime import Runtime

__all__ = [
    "DEFAULT_DB",
    "Project",
    "actor",
    "add_actor_arg",
    "add_db_args",
    "add_runtime_args",
    "args_config",
    "config_retention",
    "find_project",
    "int_in",
    "moment",
    "non_negative",
    "non_negative_span",
    "on_ledger",
    "open_ledger",
    "open_runtime",
    "positive",
    "positive_float",
    "read_args",
    "require_database",
    "resolve_db",
    "time_or_ago",
    "tools_folder",
    "unset_settings",
]

DEFAULT_DB = "sqlite:///agentq.db"
CONFIG_FILE = "agentq.toml"
T = TypeVar("T")


def _settings(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--setting expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def args_config(args: argparse.Namespace) -> Config:
    """``--config`` (which must exist), else ``./agentq.toml`` if there is one."""
    from agentq.config import load_given_config

    return load_given_config(getattr(args, "config", None))


def resolve_db(args: argparse.Namespace, config: Config | None = None) -> str:
    """--db, else $AGENTQ_DB, else agentq.toml, else the default file."""
    config = config if config is not None else args_config(args)
    db: str = args.db or os.environ.get("AGENTQ_DB") or config.agentq.db or DEFAULT_DB
    return db


def require_database(url: str) -> None:
    """Refuse a SQLite file that does not exist (opening it would create it)."""
    if not url.lower().startswith("sqlite:"):
        return
    path = urlsplit(url).path
    path = path[1:] if path.startswith("/") else path
    if path and path != ":memory:" and not Path(path).exists():
        raise ConfigError(
            f"no database at {path} (from {url}); check --db, or create it with agentq init"
        )


@dataclass(frozen=True)
class Project:
    """Where a command's tools and policies are (``policies`` may be absent)."""

    tools: Path | None  # None: none anywhere (see open_runtime's ``catalog``)
    policies: Path | None


def _given_dir(name: str, value: str, source: str) -> Path:
    path = Path(value)
    if not path.is_dir():
        raise ConfigError(f"{name} folder {value} (from {source}) does not exist")
    return path


def find_project(
    args: argparse.Namespace, config: Config, *, tools_required: bool = True
) -> Project:
    """The project's folders, only from where the user says (module docstring).
    Without ``tools_required``, no tools folder anywhere is ``tools=None``."""
    found: dict[str, Path | None] = {}
    for name in ("tools", "policies"):
        flag = getattr(args, name, None)
        configured = getattr(config.agentq, name)
        if flag:
            found[name] = _given_dir(name, flag, f"--{name}")
        elif configured:
            found[name] = _given_dir(name, configured, "agentq.toml")
        elif Path(name).is_dir():
            found[name] = Path(name).resolve()
        else:
            found[name] = None
    if found["tools"] is None and tools_required:
        raise ConfigError(
            f"no tools/ folder in {Path.cwd()}: run from your project's folder, "
            "pass --tools PATH, or set tools in agentq.toml"
        )
    return Project(tools=found["tools"], policies=found["policies"])


def tools_folder(args: argparse.Namespace, config: Config) -> Path:
    """The project's tools folder, which must be there (:func:`find_project`)."""
    tools = find_project(args, config).tools
    assert tools is not None  # find_project raises without one when they are required
    return tools


def open_runtime(args: argparse.Namespace, *, catalog: bool = False) -> Runtime:
    """The :class:`~agentq.runtime.Runtime` of the user's project (tools and
    policies loaded); it may create the database.

    ``catalog``: for commands that need no tool code (``ui``, ``serve``, ``mcp``,
    ``enqueue``). Where no tools folder is given or found, they run on a database
    that exists, with the tools its catalog records (``agentq init`` and every
    worker record them: :mod:`agentq.catalog`), and the policies folder if there
    is one, else the recorded policy."""
    from agentq.runtime import Runtime

    config = args_config(args)
    db = resolve_db(args, config)
    project = find_project(args, config, tools_required=not catalog)
    settings = config.settings | _settings(getattr(args, "setting", []))
    args.db = db
    if project.tools is None:
        require_database(db)  # a database to read the catalog of, not a new empty file
    rt = Runtime(
        db, tools=project.tools, policies=project.policies, settings=settings,
        args_inline_bytes=config.agentq.args_inline_bytes, retention=config_retention(config),
    )  # fmt: skip
    if project.tools is None:
        _say_catalog(rt, db)
    if config.agentq.audit_retention is not None:
        rt.audit_retention = config.agentq.audit_retention
    return rt


def unset_settings(rt: Runtime, tools: Iterable[str]) -> str | None:
    """One line naming the settings ``tools`` need (``@tool(settings=...)``) that
    ``rt`` lacks, whose tasks would fail (a refund dead-lettered by "setting
    'payments_url' is not configured"); None when nothing is missing."""
    missing: dict[str, list[str]] = {}
    for name in tools:
        definition = rt.tools.get(name) if name in rt.tools else None
        for key in definition.settings if definition is not None else ():
            if rt.settings.get(key) in (None, ""):
                missing.setdefault(key, []).append(name)
    if not missing:
        return None
    said = "; ".join(f"{key} (read by {', '.join(sorted(set(users)))})"
                     for key, users in sorted(missing.items()))  # fmt: skip
    example = next(iter(sorted(missing)))
    return (
        f"unset setting(s) {said}: their tasks fail until the worker that runs them has "
        f"them; set them in agentq.toml's [settings] (or --setting {example}=...)"
    )


def _say_catalog(rt: Runtime, db: str) -> None:
    """Tell (on standard error) that the tools are the database's recorded ones."""
    import sys

    from agentq.redact import redact_text

    names = sorted(t.name for t in rt.known_tools() if not rt.is_internal(t.name)
                   and not t.internal)  # fmt: skip
    listed = ", ".join(names) if names else "none yet: `agentq init` with the tools records them"
    print(
        f"agentq: no tools/ folder here: using the tools {redact_text(db)} records "
        f"({listed}); what runs tool code needs the folder",
        file=sys.stderr, flush=True,
    )  # fmt: skip


def config_retention(config: Config) -> timedelta | str:
    """``[agentq] retention`` of ``agentq.toml``, else the default (7 days)."""
    from agentq.retention import DEFAULT_RETENTION

    return DEFAULT_RETENTION if config.agentq.retention is None else config.agentq.retention


def open_ledger(args: argparse.Namespace) -> Runtime:
    """A :class:`~agentq.runtime.Runtime` over an existing database, without the
    project's tools: for reading the ledger and for actions that need no tool."""
    from agentq.runtime import Runtime

    db = resolve_db(args)
    require_database(db)
    args.db = db
    return Runtime(db)


def on_ledger(args: argparse.Namespace, use: Callable[[Runtime], T]) -> T:
    """What ``use`` makes of the ledger :func:`open_ledger` opens, closed after."""
    rt = open_ledger(args)
    try:
        return use(rt)
    finally:
        rt.close()


def add_db_args(p: argparse.ArgumentParser) -> None:
    """--config and --db: what a command that reads the database needs."""
    p.add_argument("--config", help=f"config file (default: ./{CONFIG_FILE} if present)")
    p.add_argument("--db", help=f"database URL (default: $AGENTQ_DB, agentq.toml, or {DEFAULT_DB})")


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    """--config, --db, --tools, --policies, --setting."""
    add_db_args(p)
    p.add_argument("--tools", help="tools folder (default: agentq.toml, else ./tools)")
    p.add_argument("--policies", help="policies folder (default: agentq.toml, else ./policies)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="setting handed to tool handlers (repeatable)")  # fmt: skip


def json_default(value: Any) -> str:
    """``json.dumps(default=...)`` for datetimes and the like."""
    return str(value)


def add_actor_arg(p: argparse.ArgumentParser) -> None:
    """``--by NAME``: who acts, for the audit (default: the operating-system user)."""
    p.add_argument(
        "--by",
        default=None,
        help="who is acting, recorded in the audit (default: your login name)",
    )


def actor(args: argparse.Namespace) -> str:
    """The ``--by`` name, else the login name of whoever runs the command."""
    import getpass

    given = getattr(args, "by", None)
    if given:
        return str(given)
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return f"uid {os.getuid()}"

