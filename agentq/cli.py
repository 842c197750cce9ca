"""The ``agentq`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from agentq.backends import open_backend
from agentq.errors import AgentQError

__all__ = ["main"]

DEFAULT_DB = "sqlite:///agentq.db"


def _cmd_inspect(args: argparse.Namespace) -> int:
    backend = open_backend(args.db)
    try:
        rows = [backend.stats(name) for name in backend.queues()]
    finally:
        backend.close()
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=2))
        return 0
    header = (
        "queue",
        "depth",
        "ready",
        "scheduled",
        "leased",
        "backoff",
        "oldest_s",
        "expired",
        "ttl",
    )
    print("  ".join(f"{h:>10}" for h in header))
    for r in rows:
        oldest = "-" if r.oldest_unacked_age is None else f"{r.oldest_unacked_age:.1f}"
        cells = (
            r.queue, r.depth, r.ready, r.scheduled, r.leased, r.backing_off, oldest,
            r.lease_expirations, r.ttl_dropped,
        )  # fmt: skip
        print("  ".join(f"{c!s:>10}" for c in cells))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentq`` command."""
    parser = argparse.ArgumentParser(prog="agentq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    inspect = sub.add_parser(
        "inspect", help="depth, ready, scheduled, leased, oldest age per queue"
    )
    inspect.add_argument("--db", default=DEFAULT_DB, help="database URL (default: %(default)s)")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=_cmd_inspect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentq`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except AgentQError as exc:
        print(f"agentq: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
