"""The ``agentq`` command line.

``agentq demo`` runs the refund bot end to end; ``agentq worker`` serves
tasks; ``agentq inspect`` shows queue health; ``agentq dlq list|replay|delete`` manages
dead letters; ``agentq tasks`` lists the ledger; ``agentq bench`` measures.

Every error agentq raises is printed as ``agentq: error: ...`` (exit status 2,
no traceback), and everything printed, errors included, has URL credentials
redacted (:mod:`agentq.redact`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from agentq.backends import open_backend
from agentq.errors import AgentQError, ConfigError
from agentq.logs import configure_logging
from agentq.redact import redact_data, redact_text

__all__ = ["build_parser", "main"]

DEFAULT_DB = "sqlite:///agentq.db"


def _positive(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
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


def _resolve_db(args: argparse.Namespace) -> str:
    """--db, else $AGENTQ_DB, else agentq.toml, else the default file."""
    from agentq.config import load_config

    db: str = (
        args.db or os.environ.get("AGENTQ_DB") or load_config(args.config).agentq.db or DEFAULT_DB
    )
    return db


def _runtime(args: argparse.Namespace) -> Any:
    from agentq.config import load_config
    from agentq.demo import find_project_dir
    from agentq.runtime import Runtime

    config = load_config(args.config)
    db = _resolve_db(args)
    tools = find_project_dir("tools", args.tools or config.agentq.tools)
    policies = find_project_dir("policies", args.policies or config.agentq.policies)
    settings = config.settings | _settings(getattr(args, "setting", []))
    args.db = db
    return Runtime(db, tools=tools, policies=policies, settings=settings)


def _cmd_demo(args: argparse.Namespace) -> int:
    from agentq.demo import format_summary, run_demo

    summary = run_demo(
        requests=args.requests, seed=args.seed, tools=args.tools, policies=args.policies,
        crash=not args.no_crash, out=(lambda _m: None) if args.json else print,
    )  # fmt: skip
    print(summary.to_json() if args.json else format_summary(summary))
    return 0 if summary.ok else 1


def _cmd_worker(args: argparse.Namespace) -> int:
    # The agentq logger only: third-party loggers (httpx logs every request URL at
    # INFO) keep their defaults. Each finished task is one INFO line of agentq.tasks.
    configure_logging(args.log_level, args.log_format)
    rt = _runtime(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    worker = rt.worker(concurrency=args.concurrency, queues=args.queue or None)
    print(f"agentq worker on {redact_text(args.db)}: queues {', '.join(worker.queues)}", flush=True)
    try:
        worker.run(stop)
    finally:
        rt.close()
    print(f"agentq worker stopped: {dict(worker.stats)}", flush=True)
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    if args.print_ddl and _resolve_db(args).lower().startswith("spanner:"):
        from agentq.config import load_config
        from agentq.demo import find_project_dir
        from agentq.schema import spanner_ddl  # no credentials, no spanner extra

        tools = find_project_dir("tools", args.tools or load_config(args.config).agentq.tools)
        print(";\n".join(spanner_ddl(_resolve_db(args), tools)) + ";")
        return 0
    rt = _runtime(args)
    try:
        backend = rt.backend
        statements = getattr(backend, "ddl", None)
        if statements is None:
            queues = ", ".join(backend.queues())
            print(f"{redact_text(args.db)}: queues {queues} and the runtime's tables are ready")
            return 0
        if args.print_ddl:
            print(";\n".join(statements()) + ";")
            return 0
        backend.apply_ddl()
        print(f"applied {len(statements())} DDL statement(s) to {redact_text(args.db)}")
        return 0
    finally:
        rt.close()


def _cmd_inspect(args: argparse.Namespace) -> int:
    backend = open_backend(_resolve_db(args))
    try:
        rows = [backend.stats(name) for name in backend.queues()]
        dead = len(backend.list_records("dead_letters"))
    finally:
        backend.close()
    if args.json:
        print(json.dumps({"queues": [r.__dict__ for r in rows], "dead_letters": dead}, indent=2))
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
        print("  ".join(f"{'-' if c is None else c!s:>10}" for c in cells))
    print(f"dead letters: {dead}")
    return 0


def _cmd_dlq(args: argparse.Namespace) -> int:
    if args.action != "list" and bool(args.task_ids) == bool(args.all):
        raise ConfigError(f"dlq {args.action}: name entry ids or give --all (not both)")
    rt = _runtime(args)
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


def _cmd_tasks(args: argparse.Namespace) -> int:
    rt = _runtime(args)
    try:
        for t in rt.tasks(args.status):
            print(json.dumps(redact_data(t.model_dump(mode="json")), sort_keys=True))
    finally:
        rt.close()
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from agentq.bench import format_table, run_bench

    result = run_bench(
        db=args.db, tasks=args.tasks, workers=args.workers, concurrency=args.concurrency,
        batch=args.batch, payload_bytes=args.payload_bytes, durability=args.durability,
        repeats=args.repeats, latency_samples=args.latency_samples, callers=args.callers,
        progress=(lambda _m: None) if args.json else (lambda m: print(m, flush=True)),
    )  # fmt: skip
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(text if args.json else "\n" + format_table(result))
    return 0


def _add_runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="agentq.toml", help="config file (default: %(default)s)")
    p.add_argument("--db", help=f"database URL (default: $AGENTQ_DB, agentq.toml, or {DEFAULT_DB})")
    p.add_argument("--tools", help="tools directory (default: ./tools)")
    p.add_argument("--policies", help="policies directory (default: ./policies)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="setting handed to tool handlers (repeatable)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentq`` command."""
    parser = argparse.ArgumentParser(prog="agentq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the refund bot end to end on SQLite")
    demo.add_argument("--requests", type=_positive, default=24, help="refund requests (default 24)")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--tools")
    demo.add_argument("--policies")
    demo.add_argument("--no-crash", action="store_true", help="skip the killed worker")
    demo.add_argument("--json", action="store_true", help="print only the JSON summary")
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser("bench", help="measure throughput and latency on a fresh database")
    bench.add_argument(
        "--db", help="sqlite:///DIR/x.db: where the fresh databases go (default: temp)"
    )
    bench.add_argument("--tasks", type=_positive, default=2000)
    bench.add_argument("--workers", type=_positive, default=2, help="worker processes (default 2)")
    bench.add_argument("--concurrency", type=_positive, default=16, help="handlers per worker")
    bench.add_argument("--batch", type=_positive, default=50, help="lease batch size")
    bench.add_argument(
        "--callers", type=_positive, default=8,
        help="threads deciding at once for the concurrent decision figures (1: skip them)",
    )  # fmt: skip
    bench.add_argument("--payload-bytes", type=_non_negative, default=0)
    bench.add_argument("--durability", choices=["full", "normal"], default="full")
    bench.add_argument("--repeats", type=_positive, default=3)
    bench.add_argument("--latency-samples", type=_positive, default=90)
    bench.add_argument("--json", action="store_true", help="print JSON instead of the table")
    bench.add_argument("--out", default="bench-results.json", help="write JSON here ('' to skip)")
    bench.set_defaults(func=_cmd_bench)

    worker = sub.add_parser("worker", help="serve tasks until SIGTERM/SIGINT")
    _add_runtime_args(worker)
    worker.add_argument("--concurrency", type=_positive, default=8)
    worker.add_argument("--queue", action="append", help="serve only this queue (repeatable)")
    worker.add_argument(
        "--log-level", type=str.upper, default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="level of agentq's own log; other libraries' loggers are left alone (default INFO)",
    )  # fmt: skip
    worker.add_argument(
        "--log-format", choices=["text", "json"], default="text",
        help="log lines as text or as one JSON object each (default text)",
    )  # fmt: skip
    worker.set_defaults(func=_cmd_worker)

    init = sub.add_parser("init", help="create the runtime's tables and queues (Spanner: DDL)")
    _add_runtime_args(init)
    init.add_argument("--print-ddl", action="store_true", help="print the DDL instead")
    init.set_defaults(func=_cmd_init)

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

    dlq = sub.add_parser("dlq", help="dead-letter queue")
    dlq.add_argument("action", choices=["list", "replay", "delete"])
    dlq.add_argument("task_ids", nargs="*", help="entries to replay or delete")
    dlq.add_argument("--all", action="store_true", help="every entry")
    dlq.add_argument("--yes", action="store_true", help="delete --all without asking")
    _add_runtime_args(dlq)
    dlq.set_defaults(func=_cmd_dlq)

    tasks = sub.add_parser("tasks", help="list the results ledger (JSON lines)")
    tasks.add_argument("--status", help="only tasks with this status")
    _add_runtime_args(tasks)
    tasks.set_defaults(func=_cmd_tasks)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentq`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (AgentQError, ValueError, OSError) as exc:
        # A user's mistake or the environment's, not a bug: the message, no traceback.
        print(f"agentq: error: {redact_text(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
