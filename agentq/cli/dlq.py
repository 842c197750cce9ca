"""``agentq dlq list|replay|delete``: the dead-letter queue."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentq.cli.common import add_runtime_args, open_runtime
from agentq.errors import ConfigError
from agentq.redact import redact_data

__all__ = ["register"]


def _cmd_dlq(args: argparse.Namespace) -> int:
    if args.action != "list" and bool(args.task_ids) == bool(args.all):
        raise ConfigError(f"dlq {args.action}: name entry ids or give --all (not both)")
    rt = open_runtime(args)
    try:
        if args.action == "list":
            for entry in rt.dead_letters():
                print(json.dumps(redact_data(entry), sort_keys=True))
            return 0
        if args.action == "delete":
            return _dlq_delete(rt, args)
        return _dlq_replay(rt, args)
    finally:
        rt.close()


def _dlq_replay(rt: Any, args: argparse.Namespace) -> int:
    """Replay the named entries (or all): what cannot be replayed is reported and
    skipped, never stopping the rest; the exit status says whether any was."""
    from agentq.runtime import REPLAY_REFUSALS

    replayed: list[str] = []
    skipped: dict[str, str] = {}
    if args.all:
        report = rt.replay_all()
        replayed, skipped = report.replayed, report.skipped
        for task_id in replayed:
            print(f"replayed {task_id}")
    for task_id in args.task_ids:
        try:
            info = rt.replay(task_id)
        except REPLAY_REFUSALS as exc:
            skipped[task_id] = str(exc)
            continue
        replayed.append(task_id)
        print(f"replayed {task_id} as attempt {info.attempt}")
    for task_id, why in skipped.items():
        print(f"agentq: skipped {task_id}: {why}", file=sys.stderr)
    print(f"{len(replayed)} replayed, {len(skipped)} skipped")
    return 1 if skipped else 0


def _dlq_delete(rt: Any, args: argparse.Namespace) -> int:
    ids = [str(e["entry_id"]) for e in rt.dead_letters()] if args.all else args.task_ids
    if args.all and not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError("dlq delete --all: confirm with --yes (stdin is not a terminal)")
        answer = input(f"delete all {len(ids)} dead-letter entries? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    deleted = rt.delete_dead_letters(ids)
    missing = sorted(set(ids) - set(deleted))
    for entry_id in missing:
        print(f"agentq: no dead-letter entry {entry_id}", file=sys.stderr)
    print(f"{len(deleted)} deleted")
    return 1 if missing else 0


def register(sub: Any) -> None:
    """Add ``dlq``."""
    dlq = sub.add_parser("dlq", help="dead-letter queue")
    dlq.add_argument("action", choices=["list", "replay", "delete"])
    dlq.add_argument("task_ids", nargs="*", help="entries to replay or delete")
    dlq.add_argument("--all", action="store_true", help="every entry")
    dlq.add_argument("--yes", action="store_true", help="delete --all without asking")
    add_runtime_args(dlq)
    dlq.set_defaults(func=_cmd_dlq)
