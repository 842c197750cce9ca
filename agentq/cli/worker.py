"""``agentq worker`` (serve tasks) and ``agentq init`` (create tables and queues).

The worker logs one INFO line per finished attempt (``agentq.tasks``), a
stats line every ``--stats-interval`` seconds and what it waits for when it
stops (``agentq.worker``); other libraries' loggers keep their own levels. The
database driver's warnings (psycopg's and psycopg-pool's) come out in the same
format, one of a kind per ``--log-repeat-interval`` seconds with a count.
The first SIGTERM/SIGINT stops leasing and gives tasks in flight ``--grace``
seconds; a second one exits at once (their leases expire and the tasks are
redelivered: nothing is lost, an attempt may run again). ``--once`` runs
what is ready and exits; ``--max-tasks N`` exits after N finished attempts.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from typing import Any

from agentq.cli.common import (
    add_runtime_args,
    args_config,
    int_in,
    open_runtime,
    positive,
    positive_float,
    resolve_db,
    tools_folder,
    unset_settings,
)
from agentq.cli.exits import EXIT_INTERRUPTED
from agentq.errors import ConfigError
from agentq.logs import REPEAT_INTERVAL, configure_logging
from agentq.redact import redact_text

__all__ = ["register"]

log = logging.getLogger("agentq.worker")


def _install_signals(stop: threading.Event, grace: float) -> None:
    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("%s again: stopping now; tasks in flight are left to redelivery", name)
            logging.shutdown()
            os._exit(EXIT_INTERRUPTED)
        log.info("%s: no new tasks; giving tasks in flight up to %gs (send it again to stop "
                 "at once)", name, grace)  # fmt: skip
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)


def _cmd_worker(args: argparse.Namespace) -> int:
    # The agentq logger, and the database driver's lines in the same format:
    # third-party loggers (httpx logs every request URL at INFO) keep their
    # levels. Each finished task is one INFO line of agentq.tasks.
    configure_logging(args.log_level, args.log_format, repeat_interval=args.log_repeat_interval)
    rt = open_runtime(args)
    metrics = None
    try:
        worker = rt.worker(concurrency=args.concurrency, queues=args.queue or None,
                           batch_size=args.batch_size, prefetch=args.prefetch,
                           stats_interval=args.stats_interval, worker_id=args.id,
                           heartbeat_interval=args.heartbeat_interval,
                           heartbeat_timeout=args.heartbeat_timeout)  # fmt: skip
        stop = threading.Event()
        _install_signals(stop, args.grace)
        if args.metrics_port is not None:
            from agentq.cli.metrics import MetricsServer

            metrics = MetricsServer(
                args.metrics_host, args.metrics_port, worker,
                healthy=lambda: not stop.is_set(), insecure_local=args.metrics_insecure_local,
                limits=args_config(args).servers,
            ).start()  # fmt: skip
            log.info("metrics on %s/metrics, health on %s/healthz", metrics.url, metrics.url)
        served = set(worker.queues)  # said once it starts: after any error of its setup
        unset = unset_settings(rt, (t.name for t in rt.tools if t.queue in served))
        if unset is not None:
            log.warning("%s", unset)  # a log line, in the worker's log format
        print(f"agentq worker on {redact_text(str(args.db))}: queues {', '.join(worker.queues)}",
              flush=True)  # fmt: skip
        if args.once:
            worker.drain()
        else:
            worker.run(stop, grace=args.grace, max_tasks=args.max_tasks)
    finally:
        if metrics is not None:
            metrics.close()
        rt.close()
    print(f"agentq worker stopped: {dict(worker.stats)}", flush=True)
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    if args.print_ddl and resolve_db(args).lower().startswith("spanner:"):
        from agentq.schema import spanner_ddl  # no credentials, no spanner extra

        tools = tools_folder(args, args_config(args))
        print(";\n".join(spanner_ddl(resolve_db(args), tools)) + ";")
        return 0
    if args.print_ddl and resolve_db(args).lower().startswith(("postgresql:", "postgres:")):
        from agentq.schema import postgres_ddl  # no server, no postgres extra

        tools = tools_folder(args, args_config(args))
        print(";\n".join(postgres_ddl(resolve_db(args), tools)) + ";")
        return 0
    rt = open_runtime(args)
    try:
        backend: Any = rt.backend
        statements = getattr(backend, "ddl", None)
        if statements is None:
            if args.print_ddl:
                raise ConfigError(
                    f"--print-ddl: {redact_text(str(args.db))} needs no DDL "
                    "(SQLite: agentq creates its tables itself)"
                )
            rt.record_tools()  # the tool catalog producers without the tools' code use
            queues = ", ".join(backend.queues())
            db = redact_text(str(args.db))
            print(f"{db}: queues {queues} and the runtime's tables are ready")
            return 0
        if args.print_ddl:
            print(";\n".join(statements()) + ";")
            return 0
        backend.apply_ddl()
        rt.record_tools()
        print(f"applied {len(statements())} DDL statement(s) to {redact_text(str(args.db))}")
        return 0
    finally:
        rt.close()


#: Ceilings of the worker's flags: threads of one process, messages of one lease
#: (a tool policy's ``max_batch`` has the same ceiling).
MAX_CONCURRENCY = 1024
MAX_BATCH = 10_000


def register(sub: Any) -> None:
    """Add ``worker`` and ``init``."""
    worker = sub.add_parser("worker", help="serve tasks until SIGTERM/SIGINT")
    add_runtime_args(worker)
    worker.add_argument("--concurrency", type=int_in(1, MAX_CONCURRENCY), default=8, metavar="N",
                        help="handlers running at once (threads; default 8)")  # fmt: skip
    worker.add_argument(
        "--batch-size", type=int_in(1, MAX_BATCH), default=None, metavar="N",
        help="most tasks one lease takes (default: --concurrency)",
    )  # fmt: skip
    worker.add_argument(
        "--prefetch", type=int_in(0, MAX_BATCH), default=None, metavar="N",
        help="leased tasks that may wait for a free handler, their leases renewed "
        "(default: --concurrency or --batch-size, whichever is larger; 0 for long tasks)",
    )  # fmt: skip
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
    worker.add_argument(
        "--log-repeat-interval", type=positive_float, default=REPEAT_INTERVAL, metavar="DURATION",
        help="print a repeated warning of the database driver (a failed attempt to connect) "
        f"once per this long, with how many it stands for (default {REPEAT_INTERVAL:g})",
    )  # fmt: skip
    worker.add_argument(
        "--grace",
        type=positive_float,
        default=30.0,
        metavar="DURATION",
        help="on stop, how long tasks in flight may take (default 30)",
    )
    worker.add_argument(
        "--stats-interval",
        type=positive_float,
        default=60.0,
        metavar="DURATION",
        help="log a line of counters this often (default 60)",
    )
    worker.add_argument(
        "--id", metavar="NAME",
        help="this worker's id in its heartbeat (default host:pid:random); a stable one lets a "
        "restart replace the last run's heartbeat instead of being reported lost",
    )  # fmt: skip
    worker.add_argument(
        "--heartbeat-interval", type=positive_float, default=5.0, metavar="DURATION",
        help="beat this often (default 5)",
    )  # fmt: skip
    worker.add_argument(
        "--heartbeat-timeout", type=positive_float, default=30.0, metavar="DURATION",
        help="the other workers report this one lost (and run the policy's worker_alert_tool) "
        "after this long without a beat (default 30)",
    )  # fmt: skip
    runs = worker.add_mutually_exclusive_group()
    runs.add_argument("--once", action="store_true", help="run what is ready now, then exit")
    runs.add_argument(
        "--max-tasks",
        type=positive,
        metavar="N",
        help="exit after N finished attempts (cron-style runs)",
    )
    worker.add_argument(
        "--metrics-port",
        type=int_in(0, 65535),
        metavar="PORT",
        help="serve /metrics (Prometheus) and /healthz on this port (0: any)",
    )
    worker.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address for --metrics-port (default 127.0.0.1)",
    )
    worker.add_argument(
        "--metrics-insecure-local",
        action="store_true",
        help="serve metrics without a token ($AGENTQ_METRICS_TOKEN); loopback only",
    )
    worker.set_defaults(func=_cmd_worker)

    init = sub.add_parser("init", help="create the runtime's tables and queues (Spanner: DDL)")
    add_runtime_args(init)
    init.add_argument(
        "--print-ddl", action="store_true", help="print the Spanner or PostgreSQL DDL instead"
    )
    init.set_defaults(func=_cmd_init)
