"""The database's size while agentq processes many tasks, with pruning on and off.

Not part of the test run. Usage, from the project's virtual environment:

    nice python tests/bench/storage_curve.py --tasks 1000000 --retention 30s

Two pipelines run side by side, each on its own SQLite file (durable commits,
WAL): one whose worker prunes (retention ``--retention`` of wall time) and one
whose worker does not. Running them at the same time, rather than one after the
other, gives both the same machine (a shared one's load moves figures by tens of
per cent between runs; side by side, it moves both alike). In each pipeline a
producer keeps the queue between ``--backlog`` and twice that (so the file's
size reflects retention, not a backlog; keep it well under retention x rate) and
a worker process (concurrency 16, leases of 50) processes ``--tasks`` no-op
tasks. Every ``--sample-every`` processed tasks the producer samples the file:
bytes of the database and its WAL, pages, free pages and task records.
Throughput is counted from the first sample to the last task (start-up left
out); ``producer_ran_dry`` counts the producer's polls that found the queue
empty: above a handful, the figure is the producer's rate, not the worker's.

Prints one JSON document (also written to ``--out``) with both curves and rates.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentq import Runtime, ToolContext, tool  # noqa: E402
from agentq.policies import parse_duration  # noqa: E402

QUEUE = "work"
#: How long the producer sleeps while the backlog is full.
_POLL_SECONDS = 0.05


class NoArgs(BaseModel):
    n: int


@tool(queue=QUEUE)
def noop(ctx: ToolContext, args: NoArgs) -> dict[str, Any]:
    return {"n": args.n}


def _runtime(path: Path, retention: str) -> Runtime:
    return Runtime(f"sqlite:///{path}", tools=[noop], retention=retention)


def _work(path: str, retention: str, prune: bool, tasks: int) -> None:
    rt = _runtime(Path(path), retention)
    try:
        worker = rt.worker(concurrency=16, batch_size=50, prune=prune, stats_interval=None)
        worker.run(max_tasks=tasks)
    finally:
        rt.close()


def _sample(path: Path, processed: int, started: float, final: bool) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        # Counting records reads the whole table: only at the end, where it slows nothing.
        records = (
            conn.execute("SELECT count(*) FROM agentq_records WHERE tbl = 'tasks'").fetchone()[0]
            if final
            else None
        )
    finally:
        conn.close()
    wal = Path(f"{path}-wal")
    return {
        "processed": processed,
        "seconds": round(time.monotonic() - started, 1),
        "db_bytes": path.stat().st_size,
        "wal_bytes": wal.stat().st_size if wal.exists() else 0,
        "pages": pages,
        "free_pages": free,
        "page_size": size,
        "task_records": records,
    }


def pipeline(
    name: str, folder: str, tasks: int, retention: str, prune: bool, backlog: int,
    every: int, results: Any,
) -> None:  # fmt: skip
    """Produce ``tasks`` tasks for a worker process, sampling the file as it goes."""
    path = Path(folder) / f"{name}.db"
    rt = _runtime(path, retention)
    worker = multiprocessing.Process(target=_work, args=(str(path), retention, prune, tasks))
    enqueued, samples, ran_dry = 0, [], 0
    started = time.monotonic()
    worker.start()
    next_sample, first_at = every, None
    try:
        while True:
            depth = rt.backend.stats(QUEUE).depth
            processed = enqueued - depth
            done = enqueued == tasks and depth == 0
            if processed >= next_sample or done:
                samples.append(_sample(path, processed, started, done))
                first_at = first_at or (time.monotonic(), processed)
                next_sample += every
                print(name, json.dumps(samples[-1]), file=sys.stderr, flush=True)
            if done:
                break
            if depth == 0 and 0 < enqueued < tasks:
                ran_dry += 1  # the worker waited for the producer: the rate is the producer's
            if enqueued < tasks and depth < backlog:
                batch = min(2 * backlog - depth, tasks - enqueued, 200)
                start = enqueued

                def decide(tx: Any, start: int = start, batch: int = batch) -> None:
                    for i in range(start, start + batch):
                        tx.enqueue("noop", {"n": i})

                rt.transact(decide)
                enqueued += batch
            else:
                # Short enough that the worker never drains twice the backlog in
                # one sleep (with 0.5 s and a backlog of 500 it did, and both
                # pipelines ran at the producer's ~1,000/s); a count of at most
                # twice the backlog is cheap.
                time.sleep(_POLL_SECONDS)
        worker.join(120)
        ended = time.monotonic()
    finally:
        if worker.is_alive():
            worker.terminate()
        rt.close()
    assert first_at is not None
    rate = (tasks - first_at[1]) / (ended - first_at[0]) if ended > first_at[0] else 0.0
    results[name] = {
        "prune": prune, "samples": samples, "tasks_per_s": round(rate, 1),
        "producer_ran_dry": ran_dry,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--retention", default="30s")
    # Small next to retention x rate: a task that waits in the queue for longer than
    # the retention is only found by the pruner's full passes (a realistic retention
    # is days, a realistic backlog minutes).
    parser.add_argument("--backlog", type=int, default=500)
    parser.add_argument("--sample-every", type=int, default=50_000)
    parser.add_argument("--modes", default="on,off", help="which pipelines: on, off or both")
    parser.add_argument("--dir", help="where the database files go (default: a temp dir)")
    parser.add_argument("--out", help="also write the JSON document here")
    args = parser.parse_args(argv)
    parse_duration(args.retention)
    multiprocessing.set_start_method("fork")
    folder = args.dir or tempfile.mkdtemp(prefix="agentq-storage-")
    manager = multiprocessing.Manager()
    results = manager.dict()
    runs = []
    for mode in args.modes.split(","):
        settings = (args.tasks, args.retention, mode == "on", args.backlog, args.sample_every)
        runs.append(
            multiprocessing.Process(
                target=pipeline, args=(f"prune-{mode}", folder, *settings, results)
            )
        )
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    doc = {
        "tasks": args.tasks, "retention": args.retention, "backlog": args.backlog,
        "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(),
        "runs": dict(results),
    }  # fmt: skip
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
