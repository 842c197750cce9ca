"""What the subcommands share: argument types, the runtime arguments, and
opening the runtime a command works on."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from agentq.errors import ConfigError

__all__ = [
    "DEFAULT_DB",
    "add_runtime_args",
    "non_negative",
    "open_runtime",
    "positive",
    "resolve_db",
]

DEFAULT_DB = "sqlite:///agentq.db"


def positive(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text: str) -> int:
    """argparse type: an integer of at least 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _settings(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--setting expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def resolve_db(args: argparse.Namespace) -> str:
    """--db, else $AGENTQ_DB, else agentq.toml, else the default file."""
    from agentq.config import load_config

    db: str = (
        args.db or os.environ.get("AGENTQ_DB") or load_config(args.config).agentq.db or DEFAULT_DB
    )
    return db


def open_runtime(args: argparse.Namespace) -> Any:
    """The :class:`~agentq.runtime.Runtime` the runtime arguments describe."""
    from agentq.config import load_config
    from agentq.demo import find_project_dir
    from agentq.runtime import Runtime

    config = load_config(args.config)
    db = resolve_db(args)
    tools = find_project_dir("tools", args.tools or config.agentq.tools)
    policies = find_project_dir("policies", args.policies or config.agentq.policies)
    settings = config.settings | _settings(getattr(args, "setting", []))
    args.db = db
    return Runtime(db, tools=tools, policies=policies, settings=settings)


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    """--config, --db, --tools, --policies, --setting."""
    p.add_argument("--config", default="agentq.toml", help="config file (default: %(default)s)")
    p.add_argument("--db", help=f"database URL (default: $AGENTQ_DB, agentq.toml, or {DEFAULT_DB})")
    p.add_argument("--tools", help="tools directory (default: ./tools)")
    p.add_argument("--policies", help="policies directory (default: ./policies)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="setting handed to tool handlers (repeatable)")  # fmt: skip
