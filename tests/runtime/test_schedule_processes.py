"""A periodic schedule served by two worker processes on one SQLite file (real
processes and time, bounded; issue 13, item 8): both seed it as they start, and
every slot still runs once, in one chain of runs."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from agentq import Runtime
from agentq.ledger import Tables
from agentq.testing import stop_all, worker_processes

pytestmark = pytest.mark.slow
TARGET = 8  # runs to observe before stopping the workers

_TOOL = """
import os
from pydantic import BaseModel
from agentq import ToolContext, tool

class Tick(BaseModel):
    pass

@tool(queue="ticks", every="1s")
def tick(ctx: ToolContext, args: Tick) -> None:
    with open(ctx.settings["log"], "a") as f:
        f.write(f"{ctx.scheduled_for.isoformat()} {os.getpid()}\\n")
"""


def runs(log: Path) -> list[tuple[datetime, int]]:
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(datetime.fromisoformat(slot), int(pid)) for slot, pid in rows]


def test_two_worker_processes_run_each_slot_once(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "ticks.py").write_text(_TOOL)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    log = tmp_path / "runs.log"
    (tmp_path / "policies").mkdir()  # none: the schedule is the tool's own
    options = {"tools": tools, "policies": tmp_path / "policies", "settings": {"log": str(log)}}
    with worker_processes(2, url, concurrency=2, **options) as workers:
        deadline = time.monotonic() + 90
        while len(runs(log)) < TARGET and time.monotonic() < deadline:
            assert all(w.alive for w in workers), [w.log()[-2000:] for w in workers]
            time.sleep(0.2)
        codes = stop_all(workers)
        errors = [w.log()[-2000:] for w in workers]
    assert codes == [0, 0], errors
    seen = runs(log)
    assert len(seen) >= TARGET, f"only {len(seen)} runs in 90 s: {errors}"
    slots = [slot for slot, _ in seen]
    duplicates = [slot for slot, n in Counter(slots).items() if n > 1]
    assert duplicates == [], f"slots run twice: {duplicates}"
    assert all(s.microsecond == 0 for s in slots)  # on the 1 s grid: no drift
    # One chain: each run is sent by its predecessor's end, so slots only go up (a
    # slot may be skipped if a run ends after the next one on a loaded machine).
    assert slots == sorted(slots)
    assert all(b - a >= timedelta(seconds=1) for a, b in itertools.pairwise(slots))
    rt = Runtime(url)
    try:
        [(_, record)] = rt.backend.list_records(Tables.SCHEDULES)
        assert record["generation"] == 1  # both seeded; the second changed nothing
        unfinished = [t for t in rt.tasks() if t.tool == "tick" and not t.done]
        assert len(unfinished) <= 1  # exactly one pending run (or none, if stopped mid-commit)
    finally:
        rt.close()
