"""Reads cost what they show (issue 27 item 12, issue 38 item 1): the time of
the operator's and an agent's reads at 1,000 and at 100,000 tasks.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/listing.py --small 1000 --large 100000 --requests 21 --rounds 3
    python tests/bench/listing.py --backend postgresql ...   # $AGENTQ_TEST_POSTGRES_URL
    python tests/bench/listing.py --small 1000 --large 1000000 --bulk ...

``--bulk`` fills the finished tasks fast, for a million: one real task is
enqueued and finished, then copied as stored (new ids, their ends spread over
the last 7 days) into the records table with the driver (SQLite's
``executemany``, PostgreSQL's ``COPY``: the records' triggers still count them),
and their per-minute tallies (the console chart's) are added through the
backend, as their completions would have. With ``--settle`` (PostgreSQL) the
totals' changes the load appended are then folded and vacuumed, as the
pruner's and autovacuum's first visits would have done.

Two ledgers are filled (``--small`` and ``--large`` tasks of another principal,
finished as a worker finishes them, their ends spread over the last 7 days,
unless ``--queued``; then 20 of the agent's
own, queued, the newest), each is served by its own ``agentq ui --api --tokens``
process (the console and the HTTP API), and each round times ``--requests``
requests of every kind against both servers, alternating between them (a shared
machine's speed moves). Kinds:

* ``overview``: an admin's ``GET /console/`` (counts, chart, queues, workers);
* ``inspect``: ``agentq inspect --json`` (a process: its start-up included);

* ``admin``: an admin's newest page (sees everyone's tasks);
* ``agent``: a ``read`` + ``enqueue`` token's oldest-first page of ``GET
  /v1/tasks`` (its own tasks only, behind every other principal's in key order);
* ``agent_newest``: the same token's newest page (``order=newest``);
* ``agent_console``: the same principal's task page in the console (newest first);
* ``agent_overview``: the same principal's ``GET /console/`` (its own counts: an
  overview for a principal without operate or admin);
* ``status_queued``: an admin's page of queued tasks (every task matches);
* ``status_dead``: an admin's page of dead tasks (none match: the filter that
  matches nothing);
* ``status_running``: the same for running tasks, a status the index of rare
  statuses does not hold (none match: read from the unfinished work);
* ``status_queued_oldest``: an admin's oldest-first page of queued tasks (the
  agent's 20, behind every finished task in key order);
* ``runs_agent_none``, ``runs_agent_rare``: an admin's ``GET /v1/runs`` filtered
  on an agent with no run, and on one with 20 runs, the oldest (with a runs
  kind asked for, the database also holds as many finished runs of another
  agent as tasks, each with a short conversation, written as a worker would).

Prints per kind the median milliseconds at each size (min-max over the
rounds' medians) and the median (and range) of the rounds' ratios large/small.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
OWN = 20
#: How far back the finished tasks' ends are spread (the chart shows the last hour).
HISTORY = timedelta(days=7)
TOKENS = {"admin-bench-token-0123456789": ("ops", ["admin"]),
          "agent-bench-token-0123456789": ("agent", ["enqueue", "read"])}  # fmt: skip
KINDS = {
    "overview": ("admin-bench-token-0123456789", {}),
    "inspect": ("", {}),
    "admin": ("admin-bench-token-0123456789", {}),
    "agent": ("agent-bench-token-0123456789", {}),
    "agent_newest": ("agent-bench-token-0123456789", {"order": "newest"}),
    "agent_console": ("agent-bench-token-0123456789", {}),
    "agent_overview": ("agent-bench-token-0123456789", {}),
    "status_queued": ("admin-bench-token-0123456789", {"status": "queued"}),
    "status_dead": ("admin-bench-token-0123456789", {"status": "dead"}),
    "status_running": ("admin-bench-token-0123456789", {"status": "running"}),
    "status_queued_oldest": ("admin-bench-token-0123456789", {"status": "queued",
                                                              "order": "oldest"}),
    # A tool filter that matches nothing (a tool no task called), and one that
    # matches every task, oldest first (the page then ends at the oldest ones).
    "tool_none": ("admin-bench-token-0123456789", {"tool": "request_shipping"}),
    "tool_oldest": ("admin-bench-token-0123456789", {"tool": "execute_refund",
                                                     "order": "oldest"}),
    "runs_agent_none": ("admin-bench-token-0123456789", {"agent": "nobody"}),
    "runs_agent_rare": ("admin-bench-token-0123456789", {"agent": "rare_agent"}),
}


def _fill(url: str, others: int, finished: bool) -> None:
    from agentq import Runtime
    from agentq.backends import encode_fields
    from agentq.ledger import Tables

    rt = Runtime(url, tools=ROOT / "tools", policies=ROOT / "policies")
    try:
        for first in range(0, others, 1000):
            tasks = rt.transact(lambda tx, f=first: [
                tx.enqueue("execute_refund", {"order_id": f"x{f + i}", "amount": 5}, by="other")
                for i in range(min(1000, others - f))])  # fmt: skip
            if not finished:
                continue
            # Finished as a worker finishes them (the outcome written, the message
            # acked), over the last 7 days: a ledger that keeps a week of history.
            now = rt.clock.now()
            done = [(t.task_id, encode_fields({
                "status": "succeeded", "result": {"ok": True},
                "started_at": (now - HISTORY * ((first + n + 0.5) / others)).isoformat(),
                "finished_at": (now - HISTORY * ((first + n) / others)).isoformat()}))
                for n, t in enumerate(tasks)]  # fmt: skip
            queue = str((rt.backend.get_record(Tables.TASKS, tasks[0].task_id) or {})["queue"])
            rt.backend.transact(lambda tx, done=done, queue=queue: (
                tx.update_records(Tables.TASKS, done),
                tx.ack_all(queue, [(i, 1) for i, _ in done])))  # fmt: skip
        rt.transact(lambda tx: [
            tx.enqueue("execute_refund", {"order_id": f"mine{i}", "amount": 5}, by="agent")
            for i in range(OWN)])  # fmt: skip
    finally:
        rt.close()


def _bulk_fill(url: str, others: int, settle: bool = False) -> None:
    """``others`` finished tasks of another principal, written in bulk (see ``--bulk``)."""
    from agentq import Runtime
    from agentq.backends import encode_fields, encode_record
    from agentq.backends.tallies import Tally
    from agentq.clock import to_micros
    from agentq.ledger import Tables
    from agentq.lifecycle import tallies

    rt = Runtime(url, tools=ROOT / "tools", policies=ROOT / "policies")
    try:
        [task] = rt.transact(lambda tx: [tx.enqueue(
            "execute_refund", {"order_id": "template", "amount": 5}, by="other")])  # fmt: skip
        queue = str((rt.backend.get_record(Tables.TASKS, task.task_id) or {})["queue"])
        rt.backend.transact(lambda tx: (
            tx.update_records(Tables.TASKS, [(task.task_id, encode_fields({
                "status": "succeeded", "result": {"ok": True}}))]),
            tx.ack_all(queue, [(task.task_id, 1)])))  # fmt: skip
        template = rt.backend.get_record(Tables.TASKS, task.task_id) or {}
        rt.backend.transact(lambda tx: tx.delete_record(Tables.TASKS, task.task_id))
        now = rt.clock.now()
        counts: dict[tuple[int, int], int] = {}

        def rows() -> Any:
            for n in range(others):
                ended = now - HISTORY * (n / others)
                started = now - HISTORY * ((n + 0.5) / others)
                task_id = f"tsk_{to_micros(ended):014x}{n:018x}"
                rec = {**template, "task_id": task_id, "args": {"order_id": f"x{n}", "amount": 5},
                       "started_at": started.isoformat(), "finished_at": ended.isoformat()}
                ran = (ended - started).total_seconds()
                key = (tallies.minute_of(ended), tallies.bucket_of(ran))
                counts[key] = counts.get(key, 0) + 1
                yield task_id, str(encode_record(rec))

        # The owner and tool columns (agentq.backends.owners, .tool_column),
        # written as the insert would (an earlier version, measured for
        # comparison, may have neither).
        values = {"owner": str(template.get("created_by", "local")),
                  "tool": str(template.get("tool", ""))}  # fmt: skip
        if url.startswith("sqlite"):
            import sqlite3

            conn = sqlite3.connect(url.removeprefix("sqlite:///"))
            have = {r[1] for r in conn.execute("PRAGMA table_info(agentq_records)")}
            extra = [c for c in values if c in have]
            marks = ", ?" * len(extra)
            with conn:
                conn.executemany(
                    f"INSERT INTO agentq_records (tbl, k, v{''.join(', ' + c for c in extra)}) "
                    f"VALUES ('tasks', ?, ?{marks})",
                    ((k, v, *(values[c] for c in extra)) for k, v in rows()))  # fmt: skip
            conn.close()
        else:
            import psycopg

            with psycopg.connect(url, autocommit=True) as pg:
                have = {str(r[0]) for r in pg.execute(
                    "SELECT column_name FROM information_schema.columns WHERE "
                    "table_schema = 'agentq' AND table_name = 'records'").fetchall()}  # fmt: skip
                extra = [c for c in values if c in have]
                columns = ", ".join(["tbl", "k", "v", *extra])
                with pg.cursor() as cur, cur.copy(
                    f"COPY agentq.records ({columns}) FROM STDIN"
                ) as copy:
                    for key, text in rows():
                        copy.write_row(("tasks", key, text, *(values[c] for c in extra)))
        made = [Tally(minute, "other", "succeeded", bucket, n)
                for (minute, bucket), n in counts.items()]  # fmt: skip
        for first in range(0, len(made), 5000):
            rt.backend.transact(lambda tx, f=first: tx.add_tallies(made[f : f + 5000]))
        rt.transact(lambda tx: [
            tx.enqueue("execute_refund", {"order_id": f"mine{i}", "amount": 5}, by="agent")
            for i in range(OWN)])  # fmt: skip
        if settle and not url.startswith("sqlite"):
            _settle(rt, url)
    finally:
        rt.close()


def _settle(rt: Any, url: str) -> None:
    """What the first visits of the worker's pruner and of autovacuum leave after
    the bulk load (``--settle``): the totals' change rows folded, the dead rows
    that folding left vacuumed. A ledger grown over days has had both all along;
    right after one COPY of a million rows, each count's fold would scan a
    million dead rows first."""
    import psycopg

    from agentq.ledger import Tables

    rt.backend.record_count(Tables.TASKS)  # folds the changes
    rt.backend.record_count(Tables.TASKS, owner="other")  # and the owners'
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("VACUUM (ANALYZE) agentq.record_total_changes, agentq.records")
        owners = pg.execute("SELECT to_regclass('agentq.owner_total_changes')").fetchone()
        if owners is not None and owners[0] is not None:
            pg.execute("VACUUM (ANALYZE) agentq.owner_total_changes")


def _settled(url: str) -> None:
    """:func:`_settle` after a fill through the runtime (``--settle`` without
    ``--bulk``): a backlog enqueued in a minute has no planner statistics until
    autovacuum's first ANALYZE, and a listing planned without them sorts every
    row (277 ms for a page at 100,000 queued tasks; 0.4 ms once analyzed)."""
    from agentq import Runtime

    rt = Runtime(url)
    try:
        _settle(rt, url)
    finally:
        rt.close()


def _tokens(path: Path) -> Path:
    from agentq.server.auth import hash_token

    entries = [f'[[tokens]]\nname = "{name}"\nscopes = {json.dumps(scopes)}\n'
               f'sha256 = "{hash_token(token)}"\n' for token, (name, scopes) in TOKENS.items()]
    path.write_text("\n".join(entries))
    return path


def _serve(folder: Path, url: str, tokens: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "ui", "--api", "--tokens", str(tokens),
         "--port", "0", "--db", url, "--tools", str(ROOT / "tools"),
         "--policies", str(ROOT / "policies")],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found:
            return proc, found.group(1)
        if not line and proc.poll() is not None:
            break
    raise RuntimeError("agentq ui did not start")


def _timed(client: httpx.Client, url: str, kind: str) -> tuple[float, int]:
    token, params = KINDS[kind]
    start = time.perf_counter()
    if kind == "inspect":
        done = subprocess.run(
            [sys.executable, "-m", "agentq.cli", "inspect", "--json", "--db", url],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        took = time.perf_counter() - start
        return took * 1000, len(json.loads(done.stdout)["tools"])
    page = {"overview": "/console/", "agent_overview": "/console/",
            "agent_console": "/console/tasks"}.get(kind)  # fmt: skip
    listed = "runs" if kind.startswith("runs_") else "tasks"
    path = page or f"/v1/{listed}"
    query = {} if page else {"limit": "10", **params}
    answer = client.get(path, params=query, headers={"Authorization": f"Bearer {token}"})
    took = time.perf_counter() - start
    answer.raise_for_status()
    shown = len(answer.text) if page else len(answer.json()[listed])
    return took * 1000, shown


def _database(backend: str, folder: Path, name: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{folder / name}.db"
    import psycopg

    base = os.environ["AGENTQ_TEST_POSTGRES_URL"]
    db = f"agentq_bench_{name}_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.execute(f"CREATE DATABASE {db}")
    return base.rsplit("/", 1)[0] + "/" + db


def _drop(url: str) -> None:
    if url.startswith("sqlite"):
        return
    import psycopg

    base = os.environ["AGENTQ_TEST_POSTGRES_URL"]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=21)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--queued", action="store_true", help="leave the others' tasks queued")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument("--bulk", action="store_true", help="fill finished tasks in bulk")
    parser.add_argument("--settle", action="store_true",
                        help="PostgreSQL: fold the counts, vacuum and analyze after the load")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    with tempfile.TemporaryDirectory(prefix="agentq-listing-") as tmp:
        folder = Path(tmp)
        tokens = _tokens(folder / "tokens.toml")
        sizes = {"small": args.small, "large": args.large}
        servers: dict[str, tuple[subprocess.Popen[str], str]] = {}
        urls: dict[str, str] = {}
        try:
            for name, count in sizes.items():
                start = time.perf_counter()
                urls[name] = _database(args.backend, folder, name)
                if args.bulk and not args.queued:
                    _bulk_fill(urls[name], count, args.settle)
                else:
                    _fill(urls[name], count, not args.queued)
                    if args.settle and args.backend == "postgresql":
                        _settled(urls[name])
                if any(k.startswith("runs_") for k in kinds):
                    from _runs_fill import fill_runs  # beside this script

                    fill_runs(urls[name], count, OWN)
                print(f"filled {name}: {count + OWN} tasks in {time.perf_counter() - start:.0f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
                servers[name] = _serve(folder, urls[name], tokens)
            medians: dict[str, dict[str, list[float]]] = {k: {"small": [], "large": []}
                                                          for k in kinds}  # fmt: skip
            shown: dict[str, dict[str, int]] = {k: {} for k in kinds}
            clients = {name: httpx.Client(base_url=url, timeout=600)
                       for name, (_, url) in servers.items()}  # fmt: skip
            for _ in range(args.rounds):
                for kind in kinds:
                    times: dict[str, list[float]] = {"small": [], "large": []}
                    requests = max(3, args.requests // 4) if kind == "inspect" else args.requests
                    for i in range(requests):
                        # Alternating which goes first, too.
                        for name in ("small", "large") if i % 2 else ("large", "small"):
                            took, count = _timed(clients[name], urls[name], kind)
                            times[name].append(took)
                            shown[kind][name] = count
                    for name in times:
                        medians[kind][name].append(statistics.median(times[name]))
            for client in clients.values():
                client.close()
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
            for url in urls.values():
                _drop(url)
    report: dict[str, Any] = {"backend": args.backend,
                              "tasks": {n: c + OWN for n, c in sizes.items()},
                              "finished": not args.queued, "requests": args.requests,
                              "bulk": args.bulk,
                              "rounds": args.rounds, "settle": args.settle,
                              "loadavg": os.getloadavg()}  # fmt: skip
    for kind, by_size in medians.items():
        small, large = statistics.median(by_size["small"]), statistics.median(by_size["large"])
        # Each round's ratio of its two medians (the machine's speed moves between rounds).
        ratios = [lg / sm for sm, lg in zip(by_size["small"], by_size["large"], strict=True)]
        report[kind] = {
            "small_ms": round(small, 2), "small_range": [round(min(by_size["small"]), 2),
                                                         round(max(by_size["small"]), 2)],
            "large_ms": round(large, 2), "large_range": [round(min(by_size["large"]), 2),
                                                         round(max(by_size["large"]), 2)],
            "ratio_median": round(statistics.median(ratios), 2),
            "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
            "shown": shown[kind],
        }  # fmt: skip
    print(json.dumps(report, indent=2))
    print(f"| read ({args.backend}) | {report['tasks']['small']} tasks | "
          f"{report['tasks']['large']} tasks | ratio (range) |\n| --- | ---: | ---: | ---: |",
          file=sys.stderr)  # fmt: skip
    for kind in kinds:
        r = report[kind]
        print(f"| {kind} | {r['small_ms']} ms | {r['large_ms']} ms | {r['ratio_median']} "
              f"({r['ratio_range'][0]}-{r['ratio_range'][1]}) |", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
