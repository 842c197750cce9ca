"""``agentq inspect [--watch]`` (queues, tools, approvals, dead letters, workers)
and ``agentq workers`` (live and lost workers from their heartbeats).

Both only read: they open an existing database and never create one."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from agentq.cli.common import add_db_args, positive, positive_float, require_database, resolve_db
from agentq.cli.exits import EXIT_OK
from agentq.cli.output import add_format_args, emit, print_json, table

__all__ = ["register"]

_QUEUE_COLUMNS = ("queue", "depth", "ready", "scheduled", "leased", "backing_off",
                  "oldest_unacked_age", "lease_expirations", "ttl_dropped")  # fmt: skip
_QUEUE_HEADERS = ("queue", "depth", "ready", "scheduled", "leased", "backoff", "oldest_s",
                  "expired", "ttl")  # fmt: skip
_TOOL_COLUMNS = ("tool", "queued", "running", "retrying", "awaiting_approval", "dead",
                 "waiting", "outcome_unknown", "oldest_unfinished_s",
                 "oldest_approval_s")  # fmt: skip
_WORKER_COLUMNS = ("worker_id", "status", "age_s", "queues", "concurrency", "in_flight",
                   "started_at", "lost_at", "stats")  # fmt: skip


def _open(args: argparse.Namespace) -> Any:
    url = resolve_db(args)
    require_database(url)
    from agentq import backends  # here: building the parser imports no backend

    return backends.open_backend(url)


def _snapshot(backend: Any) -> dict[str, Any]:
    from agentq import overview

    now = backend.clock.now()
    live = [w for w in overview.workers(backend, now) if w.live]
    return {
        "at": now.isoformat(timespec="seconds"),
        "queues": [r.__dict__ for r in (backend.stats(n) for n in backend.queues())],
        "tools": [asdict(t) for t in overview.tool_counts(backend, now)],
        "approvals": overview.open_approvals(backend, now),
        "dead_letters": overview.dead_letter_count(backend),
        "workers": len(live),
    }


def _frame(snap: dict[str, Any]) -> str:
    queues = [dict(zip(_QUEUE_HEADERS, (q[c] for c in _QUEUE_COLUMNS), strict=True))
              for q in snap["queues"]]  # fmt: skip
    approvals = snap["approvals"]
    oldest = approvals["oldest_s"]
    parts = [
        f"agentq inspect at {snap['at']}",
        table(queues, _QUEUE_HEADERS),
        table(snap["tools"], _TOOL_COLUMNS) if snap["tools"] else _no_unfinished(snap),
        f"approvals: {approvals['pending']} pending, {approvals['escalated']} escalated"
        + ("" if oldest is None else f", oldest {oldest:.0f}s"),
        f"dead letters: {snap['dead_letters']}",
        f"live workers: {snap['workers']}",
    ]
    return "\n\n".join(parts)


def _no_unfinished(snap: dict[str, Any]) -> str:
    """The tools table's empty state: what the ledger holds instead."""
    finished = snap.get("finished") or {}
    if not finished:
        return "no tasks"
    listed = ", ".join(f"{n} {status}" for status, n in finished.items())
    first = next(iter(finished))
    return (f"no unfinished tasks; finished: {listed} "
            f"(agentq tasks --status {first} lists them)")  # fmt: skip


def _cmd_inspect(args: argparse.Namespace) -> int:
    from agentq import overview

    backend = _open(args)
    try:
        frames = 0
        while True:
            snap = _snapshot(backend)
            if not snap["tools"] and not args.json:
                snap["finished"] = overview.finished_counts(backend)  # the empty state's words
            frames += 1
            if args.json:
                print_json(snap)
            else:
                if args.watch is not None and sys.stdout.isatty():
                    print("\x1b[H\x1b[2J", end="")  # clear the terminal, as watch(1) does
                print(_frame(snap), flush=True)
            if args.watch is None or (args.count is not None and frames >= args.count):
                return EXIT_OK
            if not sys.stdout.isatty():
                print(flush=True)
            backend.clock.sleep(args.watch)
    finally:
        backend.close()


def _cmd_workers(args: argparse.Namespace) -> int:
    from agentq import overview

    live_within = overview.LIVE_SECONDS if args.live_within is None else args.live_within
    backend = _open(args)
    try:
        found = overview.workers(backend, backend.clock.now(), live_within)
    finally:
        backend.close()
    if not args.all:
        found = [w for w in found if w.live or w.status == "lost"]
    emit(args, "workers", [asdict(w) for w in found], _WORKER_COLUMNS)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``inspect`` and ``workers``."""
    inspect = sub.add_parser(
        "inspect", help="queues, per-tool task counts, approvals, dead letters, workers"
    )
    add_db_args(inspect)
    inspect.add_argument("--json", action="store_true", help="print one JSON document per frame")
    inspect.add_argument(
        "--watch",
        type=positive_float,
        nargs="?",
        const=2.0,
        metavar="DURATION",
        help="redraw every DURATION (default 2s) until Ctrl-C",
    )
    inspect.add_argument("--count", type=positive, metavar="N", help="with --watch: N frames")
    inspect.set_defaults(func=_cmd_inspect)

    workers = sub.add_parser(
        "workers", help="live workers, and those whose heartbeat timed out (lost)"
    )
    workers.add_argument(
        "--all", action="store_true", help="also workers not heard from lately, not yet lost"
    )
    workers.add_argument(
        "--live-within",
        type=positive_float,
        default=None,  # overview.LIVE_SECONDS, read when the command runs
        metavar="DURATION",
        help="heard from within this long: live (default 30)",
    )
    add_format_args(workers)
    add_db_args(workers)
    workers.set_defaults(func=_cmd_workers)
