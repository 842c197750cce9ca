"""The drift of 1,000 periodic runs on the fake clock (issue 13, item 8's figure).

    python tests/bench/periodic_drift.py

An hourly schedule on a real SQLite file. Each run starts up to 49 minutes late
(a deterministic spread), the worker is replaced by a new one every 100 runs
(a restart: seeding must change nothing), and the workers are down for 3.5 h
three times (the default rule skips the missed slots). Prints, for the 1,000
runs, the largest distance between a run's nominal time and the slot the rule
predicts (the drift), how late runs started, and what was skipped.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool

START = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
RUNS = 1000
OUTAGES = (250, 500, 750)
slots: list[datetime] = []
started: list[datetime] = []


class Args(BaseModel):
    pass


@tool(queue="reports", every="1h")
def hourly(ctx: ToolContext, args: Args) -> None:
    assert ctx.scheduled_for is not None
    slots.append(ctx.scheduled_for)
    started.append(ctx.clock.now())


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        clock = FakeClock(START)
        rt = Runtime(f"sqlite:///{Path(folder) / 'drift.db'}", tools=[hourly], clock=clock)
        worker = rt.worker(concurrency=1)
        worker.drain()
        expected: list[datetime] = []
        slot, restarts = START + HOUR, 0
        while len(expected) < RUNS:
            n = len(expected)
            if n and n % 100 == 0:
                worker, restarts = rt.worker(concurrency=1), restarts + 1
            late = timedelta(minutes=(n * 37) % 50)
            if n in OUTAGES:
                late += timedelta(hours=3.5)
            clock.set(slot + late)
            worker.drain()
            expected.append(slot)
            slot += HOUR
            while slot <= clock.now():
                slot += HOUR
        [info] = rt.schedules()
        rt.close()
    drift = max(abs((a - e).total_seconds()) for a, e in zip(slots, expected, strict=True))
    lags = [(s - a).total_seconds() / 60 for s, a in zip(started, slots, strict=True)]
    print(f"runs: {len(slots)} (expected {RUNS}), worker restarts: {restarts}, "
          f"outages: {len(OUTAGES)} x 3.5 h")  # fmt: skip
    print(f"max |nominal - expected slot|: {drift:g} s")
    mean = sum(lags) / len(lags)
    print(f"start delay after the slot: max {max(lags):.0f} min, mean {mean:.1f} min")
    print(f"schedule record: runs {info.runs}, missed (skipped) {info.missed}, "
          f"next {info.next_run}")  # fmt: skip
    return 0 if drift == 0 and len(slots) == RUNS else 1


if __name__ == "__main__":
    argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0]).parse_args()
    sys.exit(main())
