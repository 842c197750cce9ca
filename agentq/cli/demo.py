"""``agentq demo`` (the refund bot end to end) and ``agentq bench`` (measurements)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentq.cli.common import non_negative, positive

__all__ = ["register"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from agentq.demo import format_summary, run_demo

    summary = run_demo(
        requests=args.requests, seed=args.seed, tools=args.tools, policies=args.policies,
        crash=not args.no_crash, out=(lambda _m: None) if args.json else print,
    )  # fmt: skip
    print(summary.to_json() if args.json else format_summary(summary))
    return 0 if summary.ok else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    from agentq.bench import format_table, run_bench

    result = run_bench(
        db=args.db, tasks=args.tasks, workers=args.workers, concurrency=args.concurrency,
        batch=args.batch, payload_bytes=args.payload_bytes, durability=args.durability,
        repeats=args.repeats, latency_samples=args.latency_samples, callers=args.callers,
        args_sizes=args.args_sizes, multi_queue=not args.no_multi_queue,
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
        "demo", help="run the refund bot shipped with agentq end to end on SQLite, from any folder"
    )
    demo.add_argument("--requests", type=positive, default=24, help="refund requests (default 24)")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--tools", help="a tools folder instead of the demo's own refund bot")
    demo.add_argument("--policies", help="a policies folder instead of the demo's own")
    demo.add_argument("--no-crash", action="store_true", help="skip the killed worker")
    demo.add_argument("--json", action="store_true", help="print only the JSON summary")
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser("bench", help="measure throughput and latency on a fresh database")
    bench.add_argument(
        "--db",
        help="sqlite:///DIR/x.db: where the fresh databases go (default: temp); or "
        "postgresql://...: a database on that server (a fresh schema per measurement)",
    )
    bench.add_argument("--tasks", type=positive, default=2000)
    bench.add_argument("--workers", type=positive, default=2, help="worker processes (default 2)")
    bench.add_argument("--concurrency", type=positive, default=16, help="handlers per worker")
    bench.add_argument("--batch", type=positive, default=50, help="lease batch size")
    bench.add_argument(
        "--callers", type=positive, default=8,
        help="threads deciding at once for the concurrent decision figures (1: skip them)",
    )  # fmt: skip
    bench.add_argument("--payload-bytes", type=non_negative, default=0)
    bench.add_argument(
        "--args-sizes", type=_byte_sizes, default=[], metavar="B,B,...",
        help="also measure end-to-end with these argument sizes in bytes (e.g. 0,1024,16384)",
    )  # fmt: skip
    bench.add_argument(
        "--no-multi-queue", action="store_true",
        help="skip the figure of one worker serving every queue",
    )  # fmt: skip
    bench.add_argument("--durability", choices=["full", "normal"], default="full")
    bench.add_argument("--repeats", type=positive, default=3)
    bench.add_argument("--latency-samples", type=positive, default=90)
    bench.add_argument("--json", action="store_true", help="print JSON instead of the table")
    bench.add_argument("--out", default="bench-results.json", help="write JSON here ('' to skip)")
    bench.set_defaults(func=_cmd_bench)
