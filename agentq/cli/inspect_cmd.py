"""``agentq inspect``: queue health at a glance."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentq import backends
from agentq.cli.common import resolve_db

__all__ = ["register"]

_HEADER = ("queue", "depth", "ready", "scheduled", "leased", "backoff", "oldest_s", "expired",
           "ttl")  # fmt: skip


def _cmd_inspect(args: argparse.Namespace) -> int:
    backend = backends.open_backend(resolve_db(args))
    try:
        rows = [backend.stats(name) for name in backend.queues()]
        dead = len(backend.list_records("dead_letters"))
    finally:
        backend.close()
    if args.json:
        print(json.dumps({"queues": [r.__dict__ for r in rows], "dead_letters": dead}, indent=2))
        return 0
    print("  ".join(f"{h:>10}" for h in _HEADER))
    for r in rows:
        oldest = "-" if r.oldest_unacked_age is None else f"{r.oldest_unacked_age:.1f}"
        cells = (
            r.queue, r.depth, r.ready, r.scheduled, r.leased, r.backing_off, oldest,
            r.lease_expirations, r.ttl_dropped,
        )  # fmt: skip
        print("  ".join(f"{'-' if c is None else c!s:>10}" for c in cells))
    print(f"dead letters: {dead}")
    return 0


def register(sub: Any) -> None:
    """Add ``inspect``."""
    inspect = sub.add_parser(
        "inspect", help="depth, ready, scheduled, leased, oldest age per queue"
    )
    inspect.add_argument(
        "--config", default="agentq.toml", help="config file (default: %(default)s)"
    )
    inspect.add_argument(
        "--db", help="database URL (default: $AGENTQ_DB, agentq.toml, or the default)"
    )
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=_cmd_inspect)
