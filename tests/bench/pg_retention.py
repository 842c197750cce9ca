"""agentq on PostgreSQL over a long run with retention on: do the tables stay flat?

Not part of the test run (``tests/acceptance/test_compare_postgres.py`` runs it
once with tiny numbers). Usage, from the project's virtual environment::

    python tests/bench/pg_retention.py --server postgresql://USER@HOST:PORT/postgres \\
        --tasks 1000000 --retention 60s

A fresh database on the server (a role with CREATEDB; dropped at the end unless
``--keep``), ``--workers`` worker processes (16 handlers, leases of 50) that
prune as they go (retention ``--retention`` of wall time), and a producer that
keeps the queue between ``--backlog`` and twice that, so the tables' size
reflects retention, not a backlog. Autovacuum runs with the server's own
settings (the table's header says which), as it would in production.

Every ``--sample-every`` processed tasks the producer samples, for the records
table (the ledger) and the queue's table: heap and index bytes, live and dead
rows (``pg_stat_user_tables``), and autovacuum runs so far. At the end it prints
a markdown table of the samples and one JSON document (also ``--json FILE``)
with a verdict: the bytes of both tables at the first sample after one
retention window (plus a minute for the pruner's passes and autovacuum's naps)
against the last sample (``growth_after_window``; flat is within a few per
cent), and the dead-row share at the end (the bloat autovacuum leaves).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel

from agentq import Runtime, ToolContext, tool
from agentq.policies import parse_duration

ENV = "AGENTQ_BENCH_POSTGRES_URL"
QUEUE = "work"
_POLL_SECONDS = 0.05
#: Beyond one retention window, time for the pruner's passes and autovacuum's naps.
_SETTLE_SECONDS = 60.0


class NoArgs(BaseModel):
    n: int


@tool(queue=QUEUE)
def noop(ctx: ToolContext, args: NoArgs) -> dict[str, Any]:
    return {"n": args.n}


def _work(url: str, retention: str, stop: Any) -> None:
    rt = Runtime(url, tools=[noop], retention=retention)
    try:
        rt.worker(concurrency=16, batch_size=50, prune=True, stats_interval=None).run(stop)
    finally:
        rt.close()


_SAMPLE = """
SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid), s.n_live_tup,
       s.n_dead_tup, s.autovacuum_count, s.n_tup_hot_upd, s.n_tup_upd
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE s.schemaname = 'agentq' AND c.relname IN ('records', %s)
"""


def sample(admin: Any, processed: int, started: float) -> dict[str, Any]:
    """The two tables' sizes and row counts now."""
    out: dict[str, Any] = {"processed": processed, "seconds": round(time.monotonic() - started)}
    for name, heap, index, live, dead, vacuums, hot, updates in admin.execute(
        _SAMPLE, (QUEUE,)
    ).fetchall():
        key = "records" if name == "records" else "queue"
        out[key] = {
            "heap_bytes": heap, "index_bytes": index, "live": live, "dead": dead,
            "autovacuums": vacuums,
            "hot_update_share": round(hot / updates, 3) if updates else None,
        }  # fmt: skip
    return out


def _bytes(s: dict[str, Any]) -> int:
    return sum(s[t]["heap_bytes"] + s[t]["index_bytes"] for t in ("records", "queue") if t in s)


def _dead_share(s: dict[str, Any]) -> float:
    dead = sum(s[t]["dead"] for t in ("records", "queue") if t in s)
    live = sum(s[t]["live"] for t in ("records", "queue") if t in s)
    return round(dead / (dead + live), 3) if dead + live else 0.0


def verdict(samples: list[dict[str, Any]], retention_s: float) -> dict[str, Any]:
    """Growth of the two tables after one retention window, and the bloat: the
    share of dead rows, which rises between autovacuum runs and falls at each
    (its range over the samples after the window says how far it lets it go)."""
    settled = [s for s in samples if s["seconds"] >= retention_s + _SETTLE_SECONDS]
    last = samples[-1]
    shares = [_dead_share(s) for s in (settled or [last])]
    out: dict[str, Any] = {
        "dead_share": {"min": min(shares), "median": statistics.median(shares),
                       "max": max(shares)},
        "autovacuums": {t: last[t]["autovacuums"] for t in ("records", "queue") if t in last},
    }  # fmt: skip
    if len(settled) >= 2:
        first = settled[0]
        out["bytes_after_window"] = _bytes(first)
        out["bytes_at_end"] = _bytes(last)
        out["growth_after_window"] = round(_bytes(last) / _bytes(first) - 1, 3)
    else:
        out["growth_after_window"] = None  # the run was shorter than a window: no verdict
    return out


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"PostgreSQL {doc['postgresql']['server_version'].split()[0]} (autovacuum="
        f"{doc['postgresql']['autovacuum']}, naptime {doc['postgresql']['autovacuum_naptime']}), "
        f"{doc['tasks']} tasks, retention {doc['retention']}, {doc['workers']} workers, "
        f"{doc['tasks_per_s']:,.0f} tasks/s",
        "",
        "| processed | s | records MB (heap+index) | live / dead | queue MB | live / dead |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in doc["samples"]:
        r, q = s.get("records", {}), s.get("queue", {})

        def mb(t: dict[str, Any]) -> str:
            return f"{(t.get('heap_bytes', 0) + t.get('index_bytes', 0)) / 1e6:,.1f}"

        lines.append(
            f"| {s['processed']:,} | {s['seconds']} | {mb(r)} | {r.get('live', 0):,} / "
            f"{r.get('dead', 0):,} | {mb(q)} | {q.get('live', 0):,} / {q.get('dead', 0):,} |"
        )
    v = doc["verdict"]
    growth = v["growth_after_window"]
    lines += [
        "",
        "growth after one retention window: "
        + ("n/a (run shorter than a window)" if growth is None else f"{growth:+.1%}")
        + f"; dead rows after it (autovacuum's bloat): {v['dead_share']['median']:.0%} "
        f"(min {v['dead_share']['min']:.0%}, max {v['dead_share']['max']:.0%})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--server",
        default=os.environ.get(ENV),
        help=f"postgresql:// URL of a role with CREATEDB (default: ${ENV})",
    )
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--retention", default="60s")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=500)
    parser.add_argument("--sample-every", type=int, default=50_000)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--json", help="also write the JSON document here")
    args = parser.parse_args(argv)  # fmt: skip
    if not args.server:
        parser.error(f"--server (or ${ENV}) is required: a PostgreSQL role with CREATEDB")
    retention_s = parse_duration(args.retention).total_seconds()
    import psycopg

    admin_server = psycopg.connect(args.server, autocommit=True)
    name = f"aqret_{os.getpid()}"
    admin_server.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(args.server)._replace(path=f"/{name}"))
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    try:
        rt = Runtime(url, tools=[noop], retention=args.retention)
        admin = psycopg.connect(url, autocommit=True)
        settings = dict(
            admin.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('server_version', "
                "'autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor', "
                "'fsync', 'synchronous_commit')"
            ).fetchall()
        )
        workers = [ctx.Process(target=_work, args=(url, args.retention, stop))
                   for _ in range(args.workers)]  # fmt: skip
        for w in workers:
            w.start()
        enqueued, samples = 0, []
        started = time.monotonic()
        next_sample = args.sample_every
        while True:
            depth = rt.backend.stats(QUEUE).depth
            processed = enqueued - depth
            done = enqueued == args.tasks and depth == 0
            if processed >= next_sample or done:
                samples.append(sample(admin, processed, started))
                print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
                next_sample += args.sample_every
            if done:
                break
            if enqueued < args.tasks and depth < args.backlog:
                batch = min(2 * args.backlog - depth, args.tasks - enqueued, 200)
                first = enqueued

                def decide(tx: Any, first: int = first, batch: int = batch) -> None:
                    for i in range(first, first + batch):
                        tx.enqueue("noop", {"n": i})

                rt.transact(decide)
                enqueued += batch
            else:
                time.sleep(_POLL_SECONDS)  # real time: the workers run in real time
        elapsed = time.monotonic() - started
        kept = admin.execute("SELECT count(*) FROM agentq.records WHERE tbl = 'tasks'").fetchone()[
            0
        ]
        admin.close()
        rt.close()
    finally:
        stop.set()
        for w in workers:
            w.join(60)
            if w.is_alive():
                w.terminate()
        if not args.keep:
            try:
                admin_server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:
                # An autovacuum worker on the big tables is the server's, not this
                # role's, to end: say so and still print the report.
                print(f"could not drop database {name} ({exc}); drop it later", file=sys.stderr)
        admin_server.close()
    doc: dict[str, Any] = {
        "tasks": args.tasks, "retention": args.retention, "workers": args.workers,
        "backlog": args.backlog, "tasks_per_s": args.tasks / elapsed,
        "task_records_kept_at_end": kept, "postgresql": settings, "cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(), "samples": samples,
        "verdict": verdict(samples, retention_s),
    }  # fmt: skip
    print(markdown(doc))
    print()
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return doc


if __name__ == "__main__":
    main()
