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

Each round also measures enqueueing the same number of tasks one per commit:
Huey's task calls (timed as it fills its queue), and agentq transactions that
each enqueue one task. Ratios are medians of the ratios within each round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HUEY_RUN = r"""
import json, os, subprocess, sys, time
from pathlib import Path
root = Path(sys.argv[1]); n = int(sys.argv[2]); workers = sys.argv[3]
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
print(json.dumps({"tasks_per_s": (n - 1) / (starts[-1] - starts[0]),
                  "enqueue_per_s": enqueue_per_s}))
"""


def huey_env(root: Path) -> Path:
    venv = root / "huey-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "huey>=3.5,<4"], check=True)
    return venv / "bin" / "python"


def run_huey(python: Path, n: int, workers: int) -> tuple[float, float]:
    """Huey's (processed tasks/s, enqueues/s)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [str(python), "-c", HUEY_RUN, tmp, str(n), str(workers)],
            check=True, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return float(got["tasks_per_s"]), float(got["enqueue_per_s"])


def run_agentq_enqueue(n: int) -> float:
    """agentq's enqueues/s, one per commit (a transaction enqueueing one task)."""
    from agentq.bench.decisions import enqueues
    from agentq.bench.env import BenchEnv

    with tempfile.TemporaryDirectory() as tmp:
        return enqueues(BenchEnv(Path(tmp), "full", "enq"), n, "")


def run_agentq(n: int, workers: int, concurrency: int, batch: int) -> float:
    from agentq.bench.env import BenchEnv, enqueue_burst, spawn_workers, stop_workers

    with tempfile.TemporaryDirectory() as tmp:
        env = BenchEnv(Path(tmp), "full", "cmp")
        rt = env.runtime()
        enqueue_burst(rt, n, "")
        procs = spawn_workers(env, workers, concurrency, batch)
        try:
            deadline = time.monotonic() + 600
            while rt.backend.stats("bench").depth > 0:
                if time.monotonic() > deadline:
                    raise SystemExit("agentq did not finish")
                time.sleep(0.01)
        finally:
            stop_workers(procs)
        starts = sorted(t.result["started"] for t in rt.tasks("succeeded"))
        rt.close()
    assert len(starts) == n, f"{len(starts)} of {n} succeeded"
    return (n - 1) / (starts[-1] - starts[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("installing huey into a throwaway virtual environment ...", flush=True)
        python = huey_env(Path(tmp))
        huey, ours, huey_enq, our_enq = [], [], [], []
        for r in range(args.repeats):
            processed, enqueued = run_huey(python, args.tasks, args.workers)
            huey.append(processed)
            huey_enq.append(enqueued)
            our_enq.append(run_agentq_enqueue(args.tasks))
            ours.append(run_agentq(args.tasks, args.workers, args.concurrency, args.batch))
            print(f"repeat {r + 1}: processed: huey {huey[-1]:,.0f} tasks/s, agentq "
                  f"{ours[-1]:,.0f} tasks/s; enqueue one per commit: huey {huey_enq[-1]:,.0f}/s, "
                  f"agentq {our_enq[-1]:,.0f}/s", flush=True)  # fmt: skip

    def summary(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    def ratio(ours: list[float], theirs: list[float]) -> float:
        # The median of within-round ratios: raw rates move between rounds.
        return round(statistics.median(a / b for a, b in zip(ours, theirs, strict=True)), 2)

    print(json.dumps({
        "tasks": args.tasks, "workers": args.workers, "repeats": args.repeats,
        "huey_tasks_per_s": summary(huey), "agentq_tasks_per_s": summary(ours),
        "ratio_agentq_over_huey": ratio(ours, huey),
        "huey_enqueue_per_s": summary(huey_enq), "agentq_enqueue_per_s": summary(our_enq),
        "enqueue_ratio_agentq_over_huey": ratio(our_enq, huey_enq),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
