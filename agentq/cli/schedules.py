"""``agentq schedules``: the periodic schedules, their last and next runs.

It only reads: it opens an existing database, loads no tools, and shows the
schedules the workers recorded when they started (``@tool(every=...)``,
``[schedules.NAME]`` in a policy; see :mod:`agentq.lifecycle.schedules`).
"""

from __future__ import annotations

import argparse
from typing import Any

from agentq.cli.common import add_db_args, open_ledger
from agentq.cli.exits import EXIT_OK
from agentq.cli.output import add_format_args, emit

__all__ = ["register"]

_COLUMNS = ("name", "rule", "status", "next_run", "last_run", "last_status", "runs", "missed",
            "tool")  # fmt: skip
_STATUSES = ("active", "disabled", "removed")


def _cmd_schedules(args: argparse.Namespace) -> int:
    rt = open_ledger(args)
    try:
        found = rt.schedules()
    finally:
        rt.close()
    if args.status:
        found = [s for s in found if s.status == args.status]
    elif not args.all:
        found = [s for s in found if s.status != "removed"]
    emit(args, "schedules", [s.as_row() for s in found], _COLUMNS)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``schedules``."""
    p = sub.add_parser(
        "schedules", help="periodic schedules: rule, status, next and last run"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="also schedules no longer declared")
    which.add_argument("--status", choices=_STATUSES, help="only schedules in this status")
    add_format_args(p)
    add_db_args(p)
    p.set_defaults(func=_cmd_schedules)
