"""``agentq worker`` (serve tasks) and ``agentq init`` (create tables and queues)."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from agentq.cli.common import add_runtime_args, open_runtime, positive
from agentq.logs import configure_logging
from agentq.redact import redact_text

__all__ = ["register"]


def _cmd_worker(args: argparse.Namespace) -> int:
    # The agentq logger only: third-party loggers (httpx logs every request URL at
    # INFO) keep their defaults. Each finished task is one INFO line of agentq.tasks.
    configure_logging(args.log_level, args.log_format)
    rt = open_runtime(args)
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
    rt = open_runtime(args)
    try:
        backend = rt.backend
        statements = getattr(backend, "ddl", None)
        if statements is None:
            rt.record_tools()  # the tool catalog producers without the tools' code use
            queues = ", ".join(backend.queues())
            print(f"{redact_text(args.db)}: queues {queues} and the runtime's tables are ready")
            return 0
        if args.print_ddl:
            print(";\n".join(statements()) + ";")
            return 0
        backend.apply_ddl()
        rt.record_tools()
        print(f"applied {len(statements())} DDL statement(s) to {redact_text(args.db)}")
        return 0
    finally:
        rt.close()


def register(sub: Any) -> None:
    """Add ``worker`` and ``init``."""
    worker = sub.add_parser("worker", help="serve tasks until SIGTERM/SIGINT")
    add_runtime_args(worker)
    worker.add_argument("--concurrency", type=positive, default=8)
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
    add_runtime_args(init)
    init.add_argument("--print-ddl", action="store_true", help="print the DDL instead")
    init.set_defaults(func=_cmd_init)
