"""``run_bench``: every measurement, ``repeats`` times, as medians with min and max.

The measurements are interleaved (one round of every figure, then the next
round), so a machine that gets busier during the run shifts every figure alike
and the ratios between figures of one run stay meaningful; ``ratios`` gives
the ones the project's targets name.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentq.bench.decisions import decisions, enqueue_actions, enqueues
from agentq.bench.end_to_end import end_to_end
from agentq.bench.env import BenchEnv
from agentq.bench.latency import idle_cpu, latency, latency_summary
from agentq.bench.queue_layer import queue_receive_ack, queue_send, raw_commits
from agentq.bench.runs import durable_runs
from agentq.errors import ConfigError

__all__ = ["run_bench"]


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _check_target(db: str | None, durability: str) -> tuple[Path, str | None]:
    """Where the fresh databases go: a directory for SQLite files, and for
    PostgreSQL the server's database (each measurement gets a schema of its own
    there); a clear error for anything else."""
    if durability not in ("full", "normal"):
        raise ConfigError("--durability must be full or normal")
    if db is not None and db.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        from agentq.backends import open_backend

        open_backend(db).close()  # a clear error now if the server is not there
        return Path(tempfile.mkdtemp(prefix="agentq-bench-")), db
    if db is not None and not db.startswith("sqlite:"):
        if db.startswith("spanner:"):
            from agentq.backends import open_backend

            open_backend(db).close()  # a clear error without credentials
            raise ConfigError(
                "agentq bench measures the embedded engine and PostgreSQL; a Spanner "
                "database is measured by its own metrics (this run would bill a real instance)"
            )
        raise ConfigError(f"agentq bench needs a sqlite:/// or postgresql:// URL, not {db!r}")
    root = (
        Path(db[len("sqlite:///") :]).parent
        if db
        else Path(tempfile.mkdtemp(prefix="agentq-bench-"))
    )
    root.mkdir(parents=True, exist_ok=True)
    return root, None


def run_bench(
    *,
    db: str | None = None,
    tasks: int = 2000,
    workers: int = 2,
    concurrency: int = 16,
    batch: int = 50,
    payload_bytes: int = 0,
    durability: str = "full",
    repeats: int = 3,
    latency_samples: int = 100,
    callers: int = 8,
    args_sizes: Sequence[int] = (),
    multi_queue: bool = True,
    runs: int = 200,
    idle_seconds: float = 5.0,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every measurement ``repeats`` times and return medians with min and max.

    ``callers`` threads also run the decision and enqueue-action measures at once,
    as an agent framework serving many conversations would (their commits are
    shared: group commit); 1 skips those. ``args_sizes`` adds end-to-end figures
    with that many bytes of arguments per task; ``multi_queue`` the figure of
    one worker serving every queue. ``runs`` durable agent runs (two turns
    each, an instant scripted model) measure the cost of durability per turn
    (0 skips them). ``idle_seconds`` is how long an idle worker's CPU is
    measured (a short window reads a coarser figure: the kernel counts CPU in
    ticks of 10 ms).
    """
    if not idle_seconds > 0:
        raise ConfigError(f"idle_seconds must be more than 0, got {idle_seconds!r}")
    root, server = _check_target(db, durability)
    # A folder of its own (no db, or a PostgreSQL server's): leave nothing behind.
    own_folder = db is None or server is not None
    try:
        pad = "x" * payload_bytes
        results: dict[str, list[float]] = {}
        lat_same: list[float] = []
        lat_other: list[float] = []
        run_figures: dict[str, list[float]] = {}

        def measure(name: str, where: str, fn: Callable[[BenchEnv], float]) -> None:
            with BenchEnv(root, durability, where, server) as env:
                value = fn(env)
            results.setdefault(name, []).append(value)
            progress(f"  {name}: {value:,.1f}")

        def sample(into: list[float], where: str, in_process: bool) -> None:
            with BenchEnv(root, durability, where, server) as env:
                into += latency(env, samples, in_process)

        n = min(tasks, 2000)
        samples = latency_samples // repeats or 1
        for r in range(repeats):
            progress(f"repeat {r + 1}/{repeats}")
            measure("raw_commits_per_s", "raw", lambda e: raw_commits(e, n, durability))
            if server is not None and callers > 1:
                # The server flushes concurrent clients' commits together: the floor
                # that group commit in agentq is compared with, beside the lone client's.
                measure(
                    f"raw_commits_per_s_{callers}_callers", "rawn",
                    lambda e: raw_commits(e, 2 * n, durability, callers),
                )  # fmt: skip
            measure("queue_send_per_s", "qs", lambda e: queue_send(e, n, pad.encode()))
            measure(
                "queue_recv_ack_per_s", "qr",
                lambda e: queue_receive_ack(e, tasks, batch, pad.encode()),
            )  # fmt: skip
            measure("decisions_per_s", "dec", lambda e: decisions(e, n, pad))
            measure("enqueue_per_s", "enq", lambda e: enqueues(e, n, pad))
            measure("enqueue_action_per_s", "act", lambda e: enqueue_actions(e, n, pad))
            if callers > 1:
                measure(
                    f"decisions_per_s_{callers}_callers", "decn",
                    lambda e: decisions(e, 2 * n, pad, callers),
                )  # fmt: skip
                measure(
                    f"enqueue_action_per_s_{callers}_callers", "actn",
                    lambda e: enqueue_actions(e, 2 * n, pad, callers),
                )  # fmt: skip
            for w in sorted({1, workers}):
                measure(
                    f"tasks_per_s_{w}w", f"e2e{w}",
                    functools.partial(end_to_end, n=tasks, workers=w, concurrency=concurrency,
                                      batch=batch, pad=pad),
                )  # fmt: skip
            if multi_queue:
                measure(
                    "tasks_per_s_multi_queue", "e2eall",
                    lambda e: end_to_end(e, tasks, 1, concurrency, batch, pad, queues=None),
                )  # fmt: skip
            for size in args_sizes:
                measure(
                    f"tasks_per_s_{workers}w_args_{size}B", f"e2eargs{size}",
                    functools.partial(end_to_end, n=tasks, workers=workers, concurrency=concurrency,
                                      batch=batch, pad="x" * size),
                )  # fmt: skip
            if runs:
                with BenchEnv(root, durability, "runs", server) as env:
                    for name, value in durable_runs(env, runs, concurrency).items():
                        run_figures.setdefault(name, []).append(value)
                        progress(f"  {name}: {value:,.2f}")
            sample(lat_same, "lat1", True)
            sample(lat_other, "lat2", False)
        progress("idle worker CPU")
        with BenchEnv(root, durability, "idle", server) as idle_env:
            idle = idle_cpu(idle_env, idle_seconds)
        out: dict[str, Any] = {
            "settings": {
                "tasks": tasks, "workers": workers, "concurrency": concurrency, "batch": batch,
                "callers": callers, "payload_bytes": payload_bytes, "args_sizes": list(args_sizes),
                "runs": runs, "idle_seconds": idle_seconds,
                "durability": durability, "repeats": repeats, "python": sys.version.split()[0],
                "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count(),
                "load_average": _load_average(), **_server_settings(server),
            },
            "throughput": {name: _stats(vals) for name, vals in results.items()},
            "latency_ms": {
                "same_process": latency_summary(lat_same),
                "other_process": latency_summary(lat_other),
            },
            "idle_worker_cpu_percent": round(idle, 2),
            "durable_runs": {name: _stats(vals) for name, vals in run_figures.items()},
        }  # fmt: skip
        raw = out["throughput"]["raw_commits_per_s"]["median"]
        out["fraction_of_raw"] = {
            name: round(v["median"] / raw, 3)
            for name, v in out["throughput"].items()
            if name != "raw_commits_per_s"
        }
        out["ratios"] = _ratios(results, workers, callers)
        return out
    finally:
        if own_folder:
            shutil.rmtree(root, ignore_errors=True)


def _ratios(results: dict[str, list[float]], workers: int, callers: int) -> dict[str, float]:
    """The ratios the targets name, each a median over rounds of the ratio within a
    round (figures of one round ran back to back, on the same machine load)."""

    def ratio(top: str, bottom: str) -> float | None:
        if top not in results or bottom not in results:
            return None
        return round(
            statistics.median(a / b for a, b in zip(results[top], results[bottom], strict=True)), 3
        )

    wanted = {
        f"end_to_end_{workers}w_over_queue_layer": (
            f"tasks_per_s_{workers}w",
            "queue_recv_ack_per_s",
        ),
        "end_to_end_1w_over_queue_layer": ("tasks_per_s_1w", "queue_recv_ack_per_s"),
        "multi_queue_over_single_queue": ("tasks_per_s_multi_queue", "tasks_per_s_1w"),
        "decisions_over_raw": ("decisions_per_s", "raw_commits_per_s"),
        f"decisions_{callers}_callers_over_raw": (
            f"decisions_per_s_{callers}_callers",
            "raw_commits_per_s",
        ),
        "enqueue_over_raw": ("enqueue_per_s", "raw_commits_per_s"),
        f"decisions_{callers}_callers_over_raw_{callers}_callers": (
            f"decisions_per_s_{callers}_callers",
            f"raw_commits_per_s_{callers}_callers",
        ),
    }
    out = {name: ratio(top, bottom) for name, (top, bottom) in wanted.items()}
    return {name: value for name, value in out.items() if value is not None}


def _server_settings(server: str | None) -> dict[str, Any]:
    """On PostgreSQL: the server's version and the settings that decide what a
    commit costs (none on SQLite, whose durability is ``--durability``)."""
    if server is None:
        return {}
    import psycopg

    from agentq.backends.postgres.config import parse_url

    names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "commit_delay")
    with psycopg.connect(parse_url(server).conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT " + ", ".join(f"current_setting('{n}')" for n in names)
        ).fetchone()
    return {"backend": "postgresql", "postgresql": dict(zip(names, row or (), strict=True))}


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages when the run ended (None where unknown):
    figures from a machine busy with other work are not comparable across runs."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
