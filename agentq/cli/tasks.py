"""``agentq tasks``: the results ledger."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentq.cli.common import add_runtime_args, open_runtime
from agentq.redact import redact_data

__all__ = ["register"]


def _cmd_tasks(args: argparse.Namespace) -> int:
    rt = open_runtime(args)
    try:
        for t in rt.tasks(args.status):
            print(json.dumps(redact_data(t.model_dump(mode="json")), sort_keys=True))
    finally:
        rt.close()
    return 0


def register(sub: Any) -> None:
    """Add ``tasks``."""
    tasks = sub.add_parser("tasks", help="list the results ledger (JSON lines)")
    tasks.add_argument("--status", help="only tasks with this status")
    add_runtime_args(tasks)
    tasks.set_defaults(func=_cmd_tasks)
