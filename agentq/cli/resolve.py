"""``agentq resolve ID``: an operator's finding on a task parked as outcome_unknown."""

from __future__ import annotations

import argparse
from typing import Any

from agentq import jsontext
from agentq.cli.common import actor, add_actor_arg, add_db_args, on_ledger
from agentq.cli.exits import EXIT_OK
from agentq.cli.output import print_task
from agentq.errors import ConfigError

__all__ = ["register"]


def _cmd_resolve(args: argparse.Namespace) -> int:
    result: Any = None
    if args.succeeded is not None:
        try:
            result = jsontext.loads(args.succeeded)
        except ValueError as exc:
            raise ConfigError(f"--succeeded takes the call's result as JSON: {exc}") from None
    how = "succeeded" if args.succeeded is not None else "retry" if args.retry else "failed"
    task = on_ledger(
        args, lambda rt: rt.resolve(args.task_id, how, result=result, by=actor(args),
                                    note=args.note)
    )  # fmt: skip
    print_task(args, task)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``resolve``."""
    resolve = sub.add_parser(
        "resolve",
        help="resolve a task parked as outcome_unknown (a non-idempotent call that may "
        "have applied): succeeded with its result, retry, or failed",
    )
    resolve.add_argument("task_id", help="the outcome_unknown task's id (tsk_...)")
    how = resolve.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--succeeded", metavar="RESULT_JSON", help="the call applied: record this result"
    )
    how.add_argument("--retry", action="store_true", help="it did not apply: call again")
    how.add_argument("--failed", action="store_true", help="give up: dead-letter the task")
    resolve.add_argument("--note", default="", help="what the operator found (audited)")
    resolve.add_argument("--json", action="store_true", help="print the task as JSON")
    add_actor_arg(resolve)
    add_db_args(resolve)
    resolve.set_defaults(func=_cmd_resolve)
