"""A per-key concurrency limit holds across worker processes sharing one SQLite
file (real processes and time, bounded): two workers of four handler threads
each never run more than ``max_in_flight`` refunds of one merchant at once. A
limit kept per process would let each run its own two (or all eight)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from agentq import Runtime
from agentq.testing import stop_all, worker_processes

pytestmark = pytest.mark.slow
LIMIT = 2
PER_MERCHANT = {"m-1": 10, "m-2": 4}

_TOOL = """
import os, time
from pydantic import BaseModel
from agentq import ToolContext, tool

class Refund(BaseModel):
    merchant_id: str
    n: int

@tool(queue="refunds")
def limited_refund(ctx: ToolContext, args: Refund) -> None:
    log = ctx.settings["log"]
    with open(log, "a") as f:
        f.write(f"start {time.time()} {os.getpid()} {args.merchant_id} {ctx.task_id}\\n")
    time.sleep(0.3)  # real work: long enough for other workers to try to overlap it
    with open(log, "a") as f:
        f.write(f"end {time.time()} {os.getpid()} {args.merchant_id} {ctx.task_id}\\n")
"""


def most_in_flight(log: Path) -> tuple[dict[str, int], set[int], int]:
    """Per merchant, the most tasks between their start and end lines at once; the
    worker processes that ran any; the number of finished tasks."""
    events = []
    pids = set()
    for line in log.read_text().splitlines() if log.exists() else []:
        kind, at, pid, merchant, _ = line.split()
        # An end sorts before a start logged at the same instant: no false overlap.
        events.append((float(at), kind == "start", merchant))
        pids.add(int(pid))
    now: dict[str, int] = defaultdict(int)
    most: dict[str, int] = defaultdict(int)
    ended = 0
    for _, start, merchant in sorted(events):
        now[merchant] += 1 if start else -1
        most[merchant] = max(most[merchant], now[merchant])
        ended += not start
    return dict(most), pids, ended


def test_two_worker_processes_share_one_per_key_limit(tmp_path: Path) -> None:
    (tmp_path / "refunds.py").write_text(_TOOL)
    (tmp_path / "limits.toml").write_text(
        f'[tools.limited_refund]\nconcurrency_key = "merchant_id"\nmax_in_flight = {LIMIT}\n'
    )
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    log = tmp_path / "calls.log"
    rt = Runtime(url, tools=tmp_path, policies=tmp_path, settings={"log": str(log)})
    ids = [
        rt.enqueue_action("limited_refund", {"merchant_id": m, "n": n}).task_id
        for m, count in PER_MERCHANT.items()
        for n in range(count)
    ]
    options = {"tools": tmp_path, "policies": tmp_path, "settings": {"log": str(log)}}
    with worker_processes(2, url, concurrency=4, **options) as workers:
        deadline = time.monotonic() + 120
        while most_in_flight(log)[2] < len(ids) and time.monotonic() < deadline:
            assert all(w.alive for w in workers), [w.log()[-2000:] for w in workers]
            time.sleep(0.2)
        codes = stop_all(workers)
        errors = [w.log()[-2000:] for w in workers]
    assert codes == [0, 0], errors
    most, pids, ended = most_in_flight(log)
    assert ended == len(ids), f"{ended} of {len(ids)} refunds finished in 120 s: {errors}"
    assert all(n <= LIMIT for n in most.values()), (
        f"more than {LIMIT} refunds of one merchant ran at once: {most} "
        f"(from {len(pids)} process(es))"
    )
    statuses = {rt.task(i).status for i in ids}
    assert statuses == {"succeeded"}, statuses
    assert all(rt.task(i).failures == 0 for i in ids)  # waiting for a slot is no failure
    rt.close()
