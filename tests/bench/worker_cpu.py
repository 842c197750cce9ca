"""A worker's CPU per task, two source trees side by side (issue 38, item 3).
Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/worker_cpu.py --trees main=/path/to/main branch=. \\
        --backend sqlite --tasks 5000 --rounds 4

Each round, for each tree in turn (the order alternating between rounds), it
fills a fresh database (SQLite file, or with ``--backend postgresql`` a fresh
database on ``$AGENTQ_TEST_POSTGRES_URL``'s server) with ``--tasks`` no-op
tasks, then runs ``agentq worker --once`` of that tree (``PYTHONPATH``) until
they are done, and once more on the emptied queue. The process's own CPU time
(user + system, from ``wait4``) gives:

* whole: CPU of the draining run over the tasks (start-up included);
* steady: (draining run - empty run) over the tasks: per task, start-up left out;
* start-up: the empty run's CPU (imports, opening the runtime, one lease).

Only figures of the same run compare: the load average is printed with each.
Compile both trees' bytecode first (``python -m compileall -q agentq``) when
``PYTHONDONTWRITEBYTECODE`` is set, or start-up counts compiling them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentq.bench.env import BenchEnv, enqueue_burst


def _worker(tree: str, env: BenchEnv) -> tuple[float, float]:
    """CPU seconds and wall seconds of one ``agentq worker --once`` of ``tree``."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "worker", "--db", env.url, "--tools",
         str(env.tools), "--once", "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=env.dir,
        env={**os.environ, "PYTHONPATH": tree},
    )  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    if status != 0:
        raise SystemExit(f"worker of {tree} failed: {err[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def _round(tree: str, tasks: int, server: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = BenchEnv(Path(tmp), "full", "cpu", server)
        rt = env.runtime()
        try:
            enqueue_burst(rt, tasks, "")
            cpu, wall = _worker(tree, env)
            left = rt.backend.stats("bench").depth
            if left:
                raise SystemExit(f"{left} task(s) left by the worker of {tree}")
            empty, _ = _worker(tree, env)
        finally:
            rt.close()
    return {"cpu": cpu, "wall": wall, "empty": empty, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--trees", nargs="+", required=True, metavar="NAME=PATH")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees)
    factory: Any = None
    if args.backend == "postgresql":
        from tests.postgres.server import DatabaseFactory

        factory = DatabaseFactory(os.environ["AGENTQ_TEST_POSTGRES_URL"])
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for r in range(args.rounds):
            names = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in names:
                server = factory.create() if factory is not None else None
                got = _round(str(Path(trees[name]).resolve()), args.tasks, server)
                results[name].append(got)
                print(f"round {r} {name}: cpu {got['cpu']:.3f} s, empty run {got['empty']:.3f} s, "
                      f"wall {got['wall']:.2f} s, load {got['load']:.1f}", flush=True)  # fmt: skip
    finally:
        if factory is not None:
            factory.close()
    n = args.tasks
    for name, rounds in results.items():
        whole = [1e6 * g["cpu"] / n for g in rounds]
        steady = [1e6 * (g["cpu"] - g["empty"]) / n for g in rounds]
        start = [g["empty"] for g in rounds]
        print(f"{name}: whole {statistics.median(whole):.0f} µs/task, steady "
              f"{statistics.median(steady):.0f} µs/task, start-up {statistics.median(start):.3f} s "
              f"CPU (rounds: whole {[round(w) for w in whole]}, steady "
              f"{[round(s) for s in steady]})")  # fmt: skip


if __name__ == "__main__":
    main()
