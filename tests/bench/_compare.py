"""What the side-by-side comparisons (``compare_huey.py``, ``compare_dbos.py``)
share: their options, the other system in a throwaway virtual environment,
agentq's side of the same no-op workload, interleaved rounds and the summary.

A round of either side measures three things:

* processed tasks/s: tasks enqueued before the workers start, ``--workers``
  worker processes, a no-op handler that records when it started; from the
  first start to the last, so process start-up is not counted. Every result is
  stored (in agentq's ledger, committed atomically with the ack);
* enqueues/s, one task per commit;
* latency: with one idle worker process, milliseconds from an enqueue's commit
  to its handler's start, ``--latency-samples`` times, 20 ms apart.

Rates are medians over the rounds with min and max; ratios are medians of the
ratios within each round (raw rates move between rounds); latency percentiles
pool every round's samples.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Round", "agentq_round", "compare", "main", "options", "run_other", "throwaway_env"]


@dataclass
class Round:
    """One round's figures of one system."""

    tasks_per_s: float
    enqueue_per_s: float
    latency_ms: list[float]

    @classmethod
    def of(cls, got: dict[str, Any]) -> Round:
        return cls(float(got["tasks_per_s"]), float(got["enqueue_per_s"]),
                   [float(v) for v in got["latency_ms"]])  # fmt: skip


def options(doc: str | None, tasks: int) -> argparse.Namespace:
    """The comparison's command line (``--tasks`` defaulting to ``tasks``)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--tasks", type=int, default=tasks)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=50)
    return parser.parse_args()


def throwaway_env(root: Path, requirement: str) -> Path:
    """A new virtual environment under ``root`` with ``requirement`` installed
    (never the project's); its Python."""
    venv = root / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", requirement], check=True)
    return venv / "bin" / "python"


def run_other(python: Path, script: str, *args: object) -> dict[str, Any]:
    """Run ``script`` (which prints one JSON object last) in a fresh temporary
    directory, its first argument; the object."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [str(python), "-c", script, tmp, *map(str, args)],
            check=True, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def agentq_round(args: argparse.Namespace) -> Round:
    """agentq's side of one round."""
    from agentq.bench.env import BenchEnv
    from agentq.bench.latency import latency

    enqueue_per_s = run_agentq_enqueue(args.tasks)
    tasks_per_s = run_agentq(args.tasks, args.workers, args.concurrency, args.batch)
    with tempfile.TemporaryDirectory() as tmp:
        gaps = latency(BenchEnv(Path(tmp), "full", "lat"), args.latency_samples, False)
    return Round(tasks_per_s, enqueue_per_s, gaps)


def main(
    name: str, requirement: str, doc: str | None, tasks: int,
    other: Callable[[Path, argparse.Namespace], Round],
) -> None:  # fmt: skip
    """A comparison script's whole run: its options (``--tasks`` defaulting to
    ``tasks``), ``requirement`` installed into a throwaway environment, then
    :func:`compare` with ``other(python, args)`` as the other system's round."""
    args = options(doc, tasks)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"installing {name} into a throwaway virtual environment ...", flush=True)
        python = throwaway_env(Path(tmp), requirement)
        compare(name, lambda: other(python, args), args)


def compare(name: str, other: Callable[[], Round], args: argparse.Namespace) -> None:
    """Run ``args.repeats`` rounds, the other system's then agentq's, printing
    each; then the summary as JSON."""
    theirs: list[Round] = []
    ours: list[Round] = []
    for r in range(args.repeats):
        theirs.append(other())
        ours.append(agentq_round(args))
        print(f"repeat {r + 1}: processed: {name} {theirs[-1].tasks_per_s:,.0f} tasks/s, "
              f"agentq {ours[-1].tasks_per_s:,.0f} tasks/s; enqueue one per commit: {name} "
              f"{theirs[-1].enqueue_per_s:,.0f}/s, agentq {ours[-1].enqueue_per_s:,.0f}/s",
              flush=True)  # fmt: skip

    def rates(rounds: list[Round], field: str) -> list[float]:
        return [float(getattr(x, field)) for x in rounds]

    def pooled(rounds: list[Round]) -> dict[str, float]:
        from agentq.bench.latency import latency_summary

        return latency_summary([ms for x in rounds for ms in x.latency_ms])

    print(json.dumps({
        "tasks": args.tasks, "workers": args.workers, "repeats": args.repeats,
        f"{name}_tasks_per_s": summary(rates(theirs, "tasks_per_s")),
        "agentq_tasks_per_s": summary(rates(ours, "tasks_per_s")),
        f"ratio_agentq_over_{name}": ratio(rates(ours, "tasks_per_s"),
                                            rates(theirs, "tasks_per_s")),
        f"{name}_enqueue_per_s": summary(rates(theirs, "enqueue_per_s")),
        "agentq_enqueue_per_s": summary(rates(ours, "enqueue_per_s")),
        f"enqueue_ratio_agentq_over_{name}": ratio(rates(ours, "enqueue_per_s"),
                                                    rates(theirs, "enqueue_per_s")),
        f"{name}_latency_ms": pooled(theirs), "agentq_latency_ms": pooled(ours),
    }, indent=2))  # fmt: skip


def run_agentq_enqueue(n: int) -> float:
    """agentq's enqueues/s, one per commit (a transaction enqueueing one task)."""
    from agentq.bench.decisions import enqueues
    from agentq.bench.env import BenchEnv

    with tempfile.TemporaryDirectory() as tmp:
        return float(enqueues(BenchEnv(Path(tmp), "full", "enq"), n, ""))


def run_agentq(n: int, workers: int, concurrency: int, batch: int) -> float:
    """agentq's processed tasks/s (first handler start to last)."""
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


def summary(values: list[float]) -> dict[str, float]:
    """Median, min and max of one figure over the rounds."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratio(ours: list[float], theirs: list[float]) -> float:
    """The median of the within-round ratios: raw rates move between rounds."""
    return round(statistics.median(a / b for a, b in zip(ours, theirs, strict=True)), 2)
