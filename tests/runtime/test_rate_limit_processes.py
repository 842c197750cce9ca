"""A tool's rate limit holds across worker processes sharing one SQLite file (real
processes and time, bounded; issue 9, defect 6). Before the limit lived in the
database, each process had its own budget: two workers made twice the calls."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentq import Runtime
from agentq.testing import stop_all, worker_processes

pytestmark = pytest.mark.slow
RATE = 4.0
BURST = 4  # the default: one second's calls
TARGET = 24  # calls to observe before stopping the workers
# Slack for scheduling delays on a loaded machine: a call recorded late can
# bunch up with later ones. Without the shared limit two processes overshoot by
# far more (twice the burst, twice the rate).
SLACK = 5

_TOOL = """
import os, time
from pydantic import BaseModel
from agentq import ToolContext, tool

class Call(BaseModel):
    n: int

@tool(queue="limited_api")
def limited_api(ctx: ToolContext, args: Call) -> None:
    with open(ctx.settings["log"], "a") as f:
        f.write(f"{time.time()} {os.getpid()}\\n")
"""


def calls(log: Path) -> list[tuple[float, int]]:
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return sorted((float(t), int(pid)) for t, pid in rows)


def test_two_worker_processes_share_one_rate_limit(tmp_path: Path) -> None:
    (tmp_path / "limited.py").write_text(_TOOL)
    (tmp_path / "limits.toml").write_text(f"[tools.limited_api]\nrate_limit_per_second = {RATE}\n")
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    log = tmp_path / "calls.log"
    rt = Runtime(url, tools=tmp_path, policies=tmp_path, settings={"log": str(log)})
    for i in range(60):
        rt.enqueue_action("limited_api", {"n": i})
    rt.close()
    options = {"tools": tmp_path, "policies": tmp_path, "settings": {"log": str(log)}}
    with worker_processes(2, url, concurrency=4, **options) as workers:
        deadline = time.monotonic() + 90
        while len(calls(log)) < TARGET and time.monotonic() < deadline:
            assert all(w.alive for w in workers), [w.log()[-2000:] for w in workers]
            time.sleep(0.2)
        codes = stop_all(workers)
        errors = [w.log()[-2000:] for w in workers]
    assert codes == [0, 0], errors
    seen = calls(log)
    assert len(seen) >= TARGET, f"only {len(seen)} calls in 90 s: {errors}"
    # In every window [t_i, t_j] of recorded calls, at most the burst plus the rate
    # times its length (GCRA's bound), plus slack for late recording.
    times = [t for t, _ in seen]
    worst = max(
        (j - i + 1) - (BURST + RATE * (times[j] - times[i]))
        for i in range(len(times))
        for j in range(i, len(times))
    )
    pids = {pid for _, pid in seen}
    assert worst <= SLACK, (
        f"{len(times)} calls from {len(pids)} process(es) over "
        f"{times[-1] - times[0]:.2f} s exceed {RATE}/s (burst {BURST}) by {worst:.1f}"
    )
