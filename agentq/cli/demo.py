"""``agentq demo`` (the refund bot end to end) and ``agentq bench`` (measurements)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from typing import Any, TextIO

from agentq.cli.common import non_negative, positive, positive_float, resolve_db
from agentq.errors import ConfigError

__all__ = ["register"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from agentq.demo import DemoFailed, format_summary, new_sqlite_database, run_demo

    if args.db and not args.keep:
        raise ConfigError("--db names the database --keep keeps: give --keep too")
    # --keep runs in the database this folder's commands open (agentq.toml's db,
    # else agentq.db), so that `agentq ui` and `agentq tasks` here show it.
    keep = resolve_db(args) if args.keep else None
    if keep is not None and not keep.lower().startswith(("postgresql:", "postgres:")):
        keep = new_sqlite_database(keep)  # absolute, once: the demo's worker runs elsewhere
    try:
        summary = run_demo(
            requests=args.requests, seed=args.seed, tools=args.tools, policies=args.policies,
            db=keep, crash=not args.no_crash, out=_progress(args.json),
        )  # fmt: skip
    except (KeyboardInterrupt, DemoFailed) as exc:
        if keep is not None:
            _print_half_run(keep, "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
        raise
    print(summary.to_json() if args.json else format_summary(summary))
    if keep is not None:
        _print_kept(keep, args.db, sys.stderr if args.json else sys.stdout)
    return 0 if summary.ok else 1


def _progress(json_output: bool) -> Callable[[str], None]:
    """Progress lines: on standard output, or on standard error beside --json (whose
    standard output is the JSON summary alone)."""
    if json_output:
        return lambda line: print(line, file=sys.stderr, flush=True)
    return lambda line: print(line, flush=True)


def _print_half_run(url: str, how: str) -> None:
    """A kept database the demo did not finish: where it is and how to start afresh."""
    from urllib.parse import parse_qs, urlsplit

    from agentq.demo import DEMO_SCHEMA, kept_database

    if url.lower().startswith(("postgresql:", "postgres:")):
        schema = parse_qs(urlsplit(url).query).get("schema", [DEMO_SCHEMA])[-1]
        where, fresh = kept_database(url), f"DROP SCHEMA {schema} CASCADE"
    else:
        path = url.removeprefix("sqlite:///").split("?", 1)[0]
        where, fresh = path, f"rm {shlex.quote(path)}*"
    print(
        f"agentq demo {how}: the kept database {where} holds a half-run demo; "
        f"remove it before agentq demo --keep again: {fresh}",
        file=sys.stderr,
        flush=True,
    )


def _print_kept(url: str, given: str | None, out: TextIO) -> None:
    """Where the kept database is, and the commands that show it (on PostgreSQL
    naming the demo's schema, and never a password)."""
    from agentq.demo import kept_database

    if url.lower().startswith(("postgresql:", "postgres:")):
        where = kept_database(url)
        flag = f" --db {shlex.quote(where)}"
    else:
        where = url.removeprefix("sqlite:///")
        flag = f" --db {shlex.quote(given)}" if given else ""
    print(f"\nkept the demo's database: {where}", file=out)
    print("look at it from this folder:", file=out)
    print(f"  agentq ui --insecure-local{flag}    # the console, in a browser", file=out)
    print(f"  agentq tasks{flag}                  # or: approvals, inspect, task ID", file=out)


def _cmd_new(args: argparse.Namespace) -> int:
    from agentq.demo.scaffold import NEXT_STEPS, new_project

    written = new_project(args.directory)
    top = sorted({p.relative_to(args.directory).parts[0] for p in written})
    print(f"agentq new: wrote {args.directory}/ ({', '.join(top)})")
    print("next:")
    print(f"  cd {shlex.quote(args.directory)}")
    for command, why in NEXT_STEPS:
        print(f"  {command:<28}# {why}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from agentq.bench import format_table, run_bench

    result = run_bench(
        db=args.db, tasks=args.tasks, workers=args.workers, concurrency=args.concurrency,
        batch=args.batch_size, payload_bytes=args.payload_bytes, durability=args.durability,
        repeats=args.repeats, latency_samples=args.latency_samples, callers=args.callers,
        args_sizes=args.args_sizes, multi_queue=not args.no_multi_queue, runs=args.runs,
        idle_seconds=args.idle_seconds,
        progress=(lambda _m: None) if args.json else (lambda m: print(m, flush=True)),
    )  # fmt: skip
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(text if args.json else "\n" + format_table(result))
    return 0


def _byte_sizes(text: str) -> list[int]:
    """``--args-sizes``: comma-separated non-negative byte counts."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of byte counts: {text!r}") from None
    if any(size < 0 for size in sizes):
        raise argparse.ArgumentTypeError(f"byte counts must be zero or more: {text!r}")
    return sizes


def register(sub: Any) -> None:
    """Add ``demo`` and ``bench``."""
    demo = sub.add_parser(
        "demo", help="run the refund bot shipped with agentq end to end, from any folder"
    )
    demo.add_argument("--requests", type=positive, default=24, help="refund requests (default 24)")
    demo.add_argument("--seed", type=int, default=7,
                      help="seed of the simulated agent's choices (default 7)")  # fmt: skip
    demo.add_argument("--tools", help="a tools folder instead of the demo's own refund bot")
    demo.add_argument("--policies", help="a policies folder instead of the demo's own")
    demo.add_argument("--no-crash", action="store_true", help="skip the killed worker")
    demo.add_argument(
        "--json", action="store_true",
        help="print the summary as JSON (progress goes to standard error)",
    )  # fmt: skip
    demo.add_argument(
        "--keep", action="store_true",
        help="run in this folder's database ($AGENTQ_DB, agentq.toml's db, else agentq.db; "
             "a SQLite file must not exist yet) and keep it, to look at with agentq ui or "
             "agentq tasks",
    )  # fmt: skip
    demo.add_argument(
        "--db",
        help="with --keep: the database to keep: a new SQLite file (sqlite:///PATH) or a "
        "PostgreSQL database (postgresql://...; the demo keeps to schema agentq_demo)",
    )
    demo.set_defaults(func=_cmd_demo)

    new = sub.add_parser(
        "new", help="start a project: the refund bot's tools/, policies/, agentq.toml, README.md"
    )
    new.add_argument("directory", help="the folder to make (new, or empty)")
    new.set_defaults(func=_cmd_new)

    bench = sub.add_parser("bench", help="measure throughput and latency on a fresh database")
    bench.add_argument(
        "--db",
        help="sqlite:///DIR/x.db: where the fresh databases go (default: temp); or "
        "postgresql://...: a database on that server (a fresh schema per measurement)",
    )
    bench.add_argument("--tasks", type=positive, default=2000,
                       help="tasks per end-to-end measurement (default 2000)")  # fmt: skip
    bench.add_argument("--workers", type=positive, default=2, help="worker processes (default 2)")
    bench.add_argument("--concurrency", type=positive, default=16, metavar="N",
                       help="handlers per worker (default 16)")  # fmt: skip
    bench.add_argument("--batch-size", type=positive, default=50, metavar="N",
                       help="messages a worker leases at once (default 50)")  # fmt: skip
    # The old spelling, kept working: the worker and prune say --batch-size.
    bench.add_argument("--batch", type=positive, dest="batch_size", help=argparse.SUPPRESS)
    bench.add_argument(
        "--callers", type=positive, default=8,
        help="threads deciding at once for the concurrent decision figures (1: skip them)",
    )  # fmt: skip
    bench.add_argument("--payload-bytes", type=non_negative, default=0,
                       help="padding added to each task's arguments (default 0)")  # fmt: skip
    bench.add_argument(
        "--args-sizes", type=_byte_sizes, default=[], metavar="B,B,...",
        help="also measure end-to-end with these argument sizes in bytes (e.g. 0,1024,16384)",
    )  # fmt: skip
    bench.add_argument(
        "--no-multi-queue", action="store_true",
        help="skip the figure of one worker serving every queue",
    )  # fmt: skip
    bench.add_argument(
        "--runs", type=non_negative, default=200, metavar="N",
        help="durable agent runs (2 turns each, instant scripted model) for the cost of "
        "durability per turn (default 200; 0 skips)",
    )  # fmt: skip
    bench.add_argument("--durability", choices=["full", "normal"], default="full",
                       help="SQLite synchronous=FULL or NORMAL (default full)")  # fmt: skip
    bench.add_argument(
        "--repeats",
        type=positive,
        default=3,
        help="interleaved rounds; figures are their medians (default 3)",
    )
    bench.add_argument(
        "--latency-samples",
        type=positive,
        default=90,
        help="tasks timed for enqueue-to-start latency (default 90)",
    )
    bench.add_argument(
        "--idle-seconds", type=positive_float, default=5.0, metavar="S",
        help="how long an idle worker's CPU is measured: seconds or a duration (default 5)",
    )  # fmt: skip
    bench.add_argument("--json", action="store_true", help="print JSON instead of the table")
    bench.add_argument("--out", default="bench-results.json", help="write JSON here ('' to skip)")
    bench.set_defaults(func=_cmd_bench)
