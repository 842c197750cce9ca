"""Parked durable runs cost a worker nothing (issue 37): an idle ``agentq worker``
beside 0 and beside N runs awaiting a human's approval.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/parked_runs.py --runs 10000 [--db postgresql://...] [--seconds 20]

It parks N runs first (each run's first turn, from the scripted model on
loopback, calls a tool that the policy gates, so the run ends its turn
``awaiting_approval``: its task awaits approval, its 72 h escalation is
scheduled), carried by an in-process worker. Then it starts one ``agentq
worker`` process on the database, lets it settle, and samples for
``--seconds``: the process's resident memory, its CPU time, and on PostgreSQL
the database's transactions and rows read (``pg_stat_database``). The same is
measured first on an empty database of the same kind. A parked run is a row:
the worker leases only ready messages, so neither figure should grow with N.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

TOOLS = '''
import os
from pydantic import BaseModel
from agentq import Agent, OpenAICompatibleModel, ToolContext, tool


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="payments")
def execute_refund(ctx: ToolContext, args: Refund) -> dict:
    return {"refunded": args.amount}


parked = Agent("parked", OpenAICompatibleModel(os.environ["PARKED_MODEL_URL"], "scripted"),
               tools=["execute_refund"])
'''

POLICY = '[[approvals]]\ntool = "execute_refund"\n'


def _stat(pid: int) -> tuple[int, float]:
    """(resident bytes, CPU seconds) of a process, from /proc."""
    with open(f"/proc/{pid}/statm") as fh:
        rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks


def _pg_counters(url: str) -> tuple[int, int] | None:
    if not url.startswith("postgres"):
        return None
    import psycopg

    from agentq.backends.postgres.config import parse_url

    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback, tup_returned + tup_fetched "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _measure(db: str, folder: Path, seconds: float) -> dict[str, Any]:
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "worker", "--db", db, "--tools",
         str(folder / "tools"), "--policies", str(folder / "policies")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(5)  # started, recorded its tools, leased what was ready
        rss0, cpu0 = _stat(worker.pid)
        pg0 = _pg_counters(db)
        time.sleep(seconds)
        rss1, cpu1 = _stat(worker.pid)
        pg1 = _pg_counters(db)
    finally:
        worker.terminate()
        worker.wait(30)
    out: dict[str, Any] = {
        "worker_rss_mib": round(rss1 / 2**20, 1),
        "worker_rss_growth_mib": round((rss1 - rss0) / 2**20, 2),
        "worker_cpu_percent": round(100 * (cpu1 - cpu0) / seconds, 2),
    }
    if pg0 is not None and pg1 is not None:
        out["db_transactions_per_s"] = round((pg1[0] - pg0[0]) / seconds, 1)
        out["db_rows_read_per_s"] = round((pg1[1] - pg0[1]) / seconds, 1)
    return out


def _park(db: str, folder: Path, runs: int) -> float:
    from agentq import Runtime

    rt = Runtime(db, tools=folder / "tools", policies=folder / "policies")
    try:
        start = time.monotonic()
        for i in range(runs):
            rt.start_run("parked", f"refund order {i}")
            if i % 1000 == 999:
                rt.worker(concurrency=16, receive_timeout=0.05).drain()
        rt.worker(concurrency=16, receive_timeout=0.05).drain()
        parked = len(rt.runs("awaiting_approval", limit=1000))
        if runs and parked == 0:
            raise SystemExit("no run parked: see the policy and the model")
        return time.monotonic() - start
    finally:
        rt.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--db", default=None, help="a PostgreSQL server URL (default: SQLite)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from agentq.testing import Reply, ScriptedModel

    script = [Reply.tool_calls(("execute_refund", {"order_id": "o", "amount": 1.0}))]
    results = {}
    with ScriptedModel(script) as model, tempfile.TemporaryDirectory() as tmp:
        os.environ["PARKED_MODEL_URL"] = model.base_url
        for label, count in (("empty", 0), (f"{args.runs}_parked", args.runs)):
            folder = Path(tmp) / label
            (folder / "tools").mkdir(parents=True)
            (folder / "tools" / "parked.py").write_text(textwrap.dedent(TOOLS))
            (folder / "policies").mkdir()
            (folder / "policies" / "gate.toml").write_text(POLICY)
            db = f"sqlite:///{folder / 'parked.db'}" if args.db is None else (
                f"{args.db}{'&' if '?' in args.db else '?'}schema=parked_{label}")
            took = _park(db, folder, count)
            results[label] = {"parked_in_s": round(took, 1), **_measure(db, folder, args.seconds)}
            print(label, json.dumps(results[label]), flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
