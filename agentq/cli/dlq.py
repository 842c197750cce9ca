"""``agentq dlq list|replay|delete``: the dead-letter queue."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentq.cli.common import actor, add_actor_arg, add_runtime_args, open_ledger, open_runtime
from agentq.cli.output import add_format_args, emit
from agentq.errors import ConfigError

__all__ = ["register"]

_COLUMNS = ("entry_id", "tool", "attempt", "stray", "error")


def _confirm(what: str, count: int, args: argparse.Namespace) -> bool:
    """A bulk action goes ahead only with --yes, or a "y" typed at a terminal."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigError(
            f"dlq {args.action} --all would {what} {count} entries: confirm with --yes "
            "(stdin is not a terminal)"
        )
    answer = input(f"{what} all {count} dead-letter entries? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _cmd_dlq(args: argparse.Namespace) -> int:
    if args.action != "list" and bool(args.task_ids) == bool(args.all):
        raise ConfigError(f"dlq {args.action}: name entry ids or give --all (not both)")
    # Replaying sends the task to its tool's queue: that needs the project's tools.
    rt = open_runtime(args) if args.action == "replay" else open_ledger(args)
    try:
        if args.action == "list":
            emit(args, "dead_letters", rt.dead_letters(), _COLUMNS)
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
        if not _confirm("replay", len(rt.dead_letters()), args):
            print("nothing replayed")
            return 1
        report = rt.replay_all(by=actor(args))
        replayed, skipped = report.replayed, report.skipped
        for task_id in replayed:
            print(f"replayed {task_id}")
    for task_id in args.task_ids:
        try:
            info = rt.replay(task_id, by=actor(args))
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
    if args.all and not _confirm("delete", len(ids), args):
        print("nothing deleted")
        return 1
    deleted = rt.delete_dead_letters(ids, by=actor(args))
    missing = sorted(set(ids) - set(deleted))
    for entry_id in missing:
        print(f"agentq: no dead-letter entry {entry_id}", file=sys.stderr)
    print(f"{len(deleted)} deleted")
    return 1 if missing else 0


def register(sub: Any) -> None:
    """Add ``dlq``."""
    dlq = sub.add_parser("dlq", help="dead-letter queue")
    dlq.add_argument("action", choices=["list", "replay", "delete"],
                     help="list the entries, replay them (run again) or delete them")  # fmt: skip
    dlq.add_argument("task_ids", nargs="*", help="entries to replay or delete")
    dlq.add_argument("--all", action="store_true", help="every entry")
    dlq.add_argument("--yes", action="store_true", help="replay or delete --all without asking")
    add_actor_arg(dlq)
    add_format_args(dlq)
    add_runtime_args(dlq)
    dlq.set_defaults(func=_cmd_dlq)
