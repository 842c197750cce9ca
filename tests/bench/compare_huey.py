"""Compare agentq with Huey (SQLite storage) on the same no-op workload, side by side.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/compare_huey.py --tasks 5000 --repeats 3

Huey is installed into a throwaway virtual environment (it never touches the
project's). Both run with durable commits (SQLite WAL, synchronous=FULL:
Huey's ``fsync=True``), two worker processes, tasks enqueued before the workers
start so that enqueue speed is not part of the figure, and a no-op task that
records when it started. Throughput is measured from the first task start to
the last one, so process start-up is not counted either; every task's result is
stored (Huey's result store; agentq's ledger, committed atomically with the ack).

Each round also measures enqueueing the same number of tasks one per commit
(Huey's task calls, timed as it fills its queue, against agentq transactions
that each enqueue one task) and the latency from an enqueue to its handler's
start with one idle consumer process of 4 threads (:mod:`_compare` says how
figures are summarised).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _compare import Round, main, run_other

HUEY_RUN = r"""
import json, os, subprocess, sys, time
from pathlib import Path
root = Path(sys.argv[1]); n = int(sys.argv[2]); workers = sys.argv[3]; samples = int(sys.argv[4])
(root / "hueyapp.py").write_text(
    "import time\n"
    "from huey import SqliteHuey\n"
    f"huey = SqliteHuey(filename={str(root / 'huey.db')!r}, fsync=True, journal_mode='wal')\n"
    "@huey.task()\n"
    "def noop(i):\n"
    "    return time.time()\n"
)
sys.path.insert(0, str(root))
from hueyapp import huey, noop
began = time.perf_counter()
results = [noop(i) for i in range(n)]  # one enqueue per commit
enqueue_per_s = n / (time.perf_counter() - began)
consumer = subprocess.Popen(
    [os.path.join(os.path.dirname(sys.executable), "huey_consumer"), "hueyapp.huey",
     "-w", workers, "-k", "process", "-d", "0.001", "-m", "0.01", "-C", "-q"],
    cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
deadline = time.time() + 600
while huey.result_count() < n:
    if time.time() > deadline:
        raise SystemExit("huey did not finish")
    time.sleep(0.01)
consumer.terminate(); consumer.wait(30)
starts = sorted(r.get() for r in results)
# Latency: one consumer process (4 threads), idle between samples.
consumer = subprocess.Popen(
    [os.path.join(os.path.dirname(sys.executable), "huey_consumer"), "hueyapp.huey",
     "-w", "4", "-k", "thread", "-d", "0.001", "-m", "0.01", "-C", "-q"],
    cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
time.sleep(0.5)
gaps = []
for i in range(samples):
    r = noop(i)
    committed = time.time()
    gaps.append((r.get(blocking=True, timeout=10) - committed) * 1000)
    time.sleep(0.02)
consumer.terminate(); consumer.wait(30)
print(json.dumps({"tasks_per_s": (n - 1) / (starts[-1] - starts[0]),
                  "enqueue_per_s": enqueue_per_s, "latency_ms": gaps}))
"""


def run_huey(python: Path, args: argparse.Namespace) -> Round:
    """Huey's processed tasks/s, enqueues/s and enqueue-to-start latencies."""
    return Round.of(run_other(python, HUEY_RUN, args.tasks, args.workers, args.latency_samples))


if __name__ == "__main__":
    main("huey", "huey>=3.5,<4", __doc__, 5000, run_huey)
