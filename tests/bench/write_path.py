"""The write side of the hot path, measured beside its floors in one run.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/write_path.py --repeats 3

Every round measures, interleaved (raw figures on a shared machine move a lot;
the ratios measured in the same round are what count):

* ``raw`` — single-row SQLite commits (WAL, synchronous=FULL), the floor;
* ``decisions_1`` / ``decisions_8`` — a transaction writing one application row
  and enqueueing one task, from 1 and 8 threads (``agentq bench``'s measure);
* ``enqueue_action`` — ``Runtime.enqueue_action`` one task per commit, without
  and with an idempotency key;
* ``huey_enqueue`` — Huey 3.5 (SQLite, ``fsync=True``, WAL) enqueueing one task
  per commit (needs ``pip install huey``; skipped without it);
* ``bytes_per_task_<n>`` — database size (file, and used pages) per task after
  ``--tasks`` tasks with ``n`` bytes of args were enqueued and processed;
* ``e2e_<n>`` — those tasks' processing rate (2 worker processes).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentq.bench.decisions import decisions as _decisions
from agentq.bench.decisions import enqueue_actions as _enqueue_actions
from agentq.bench.decisions import in_threads as _in_threads
from agentq.bench.env import BenchEnv as _Env
from agentq.bench.env import spawn_workers as _spawn_workers
from agentq.bench.env import stop_workers as _stop_workers
from agentq.bench.queue_layer import raw_commits as _raw_commits


def enqueue_plain(env: _Env, n: int) -> float:
    """enqueue_action without an idempotency key, one per commit."""
    rt = env.runtime()
    rate = _in_threads(1, n, lambda i: rt.enqueue_action("noop", {"n": i}))
    rt.close()
    return rate


def huey_enqueue(root: Path, n: int) -> float | None:
    try:
        from huey import SqliteHuey
    except ImportError:
        return None
    d = Path(tempfile.mkdtemp(prefix="huey-", dir=root))
    huey = SqliteHuey(filename=str(d / "huey.db"), fsync=True, journal_mode="wal")

    @huey.task()
    def noop(i: int) -> float:
        return time.time()

    start = time.perf_counter()
    for i in range(n):
        noop(i)
    elapsed = time.perf_counter() - start
    return n / elapsed


def storage(env: _Env, n: int, args_bytes: int) -> dict[str, float]:
    """Enqueue ``n`` tasks in transactions of 1000, process them, and report the
    database's size per task (file; used pages) and the processing rate."""
    rt = env.runtime()
    pad = "x" * max(0, args_bytes - len('{"n":0,"pad":""}'))
    procs = _spawn_workers(env, 2, 16, 50)
    try:
        start = time.perf_counter()
        for chunk in range(0, n, 1000):
            rt.transact(
                lambda tx, c=chunk: [
                    tx.enqueue("noop", {"n": i, "pad": pad}) for i in range(c, min(c + 1000, n))
                ]
            )
        deadline = start + 600
        while rt.backend.stats("bench").depth > 0:
            if time.perf_counter() > deadline:
                raise RuntimeError("tasks did not finish in 10 minutes")
            time.sleep(0.002)
        elapsed = time.perf_counter() - start
    finally:
        _stop_workers(procs)
    rt.close()
    conn = sqlite3.connect(env.path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    conn.close()
    return {
        "file_bytes_per_task": env.path.stat().st_size / n,
        "used_bytes_per_task": (pages - free) * page / n,
        "tasks_per_s": n / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000, help="commits per rate figure")
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per storage figure")
    parser.add_argument("--only", default="", help="comma-separated figure groups")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))

    def wanted(group: str) -> bool:
        return not only or group in only

    root = Path(tempfile.mkdtemp(prefix="agentq-write-path-"))
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float | None) -> None:
        if value is not None:
            figures.setdefault(name, []).append(value)
            print(f"  {name}: {value:,.1f}", flush=True)

    n = args.n
    for r in range(args.repeats):
        print(f"round {r + 1}/{args.repeats}", flush=True)
        add("raw", _raw_commits(_Env(root, "full", "raw"), n, "full"))
        if wanted("decisions"):
            add("decisions_1", _decisions(_Env(root, "full", "d1"), n, ""))
            add("decisions_8", _decisions(_Env(root, "full", "d8"), 2 * n, "", 8))
        if wanted("enqueue"):
            add("huey_enqueue", huey_enqueue(root, n))
            add("enqueue_action", enqueue_plain(_Env(root, "full", "ea"), n))
            add("enqueue_action_idem", _enqueue_actions(_Env(root, "full", "eai"), n, ""))
        if wanted("storage"):
            for size in (0, 1024, 16384):
                got = storage(_Env(root, "full", f"st{size}"), args.tasks, size)
                add(f"file_bytes_per_task_{size}", got["file_bytes_per_task"])
                add(f"used_bytes_per_task_{size}", got["used_bytes_per_task"])
                add(f"e2e_{size}", got["tasks_per_s"])
    out: dict[str, Any] = {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v)}
        for name, v in figures.items()
    }
    ratios: dict[str, list[float]] = {}
    for i in range(args.repeats):

        def at(name: str, i: int = i) -> float | None:
            vals = figures.get(name, [])
            return vals[i] if i < len(vals) else None

        raw = at("raw")
        pairs = {
            "decisions_1/raw": (at("decisions_1"), raw),
            "decisions_8/raw": (at("decisions_8"), raw),
            "enqueue_action/huey": (at("enqueue_action"), at("huey_enqueue")),
            "enqueue_action_idem/huey": (at("enqueue_action_idem"), at("huey_enqueue")),
            "e2e_16384/e2e_0": (at("e2e_16384"), at("e2e_0")),
        }
        for name, (a, b) in pairs.items():
            if a is not None and b:
                ratios.setdefault(name, []).append(a / b)
    out["ratios_per_round"] = {
        name: {"median": round(statistics.median(v), 3), "min": round(min(v), 3),
               "max": round(max(v), 3)}
        for name, v in ratios.items()
    }  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
