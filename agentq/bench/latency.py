"""Latency and idle cost: enqueue commit to handler start, and an idle worker's CPU.

* ``latency_ms`` — for an idle worker in the same process and in another
  process: p50 / p99 / max over the samples, in milliseconds;
* ``idle_worker_cpu_percent`` — CPU of an idle worker process over 5 s
  (``agentq bench --idle-seconds``).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from agentq.bench.env import BENCH_QUEUE, BenchEnv, spawn_workers, stop_workers

__all__ = ["idle_cpu", "latency", "latency_summary"]


def latency(env: BenchEnv, samples: int, in_process: bool) -> list[float]:
    """Milliseconds from an enqueue's commit to its handler's start, per sample."""
    rt = env.runtime()
    procs: list[subprocess.Popen[str]] = []
    worker = None
    if in_process:
        worker = rt.worker(concurrency=4, queues=[BENCH_QUEUE]).start()
    else:
        procs = spawn_workers(env, 1, 4, 4)
    try:
        time.sleep(0.3)  # let the worker settle into its idle wait
        gaps = []
        for i in range(samples):
            task = rt.enqueue_action("noop", {"n": i})
            committed = time.time()
            deadline = time.perf_counter() + 10
            while True:
                info = rt.task(task.task_id)
                if info.status == "succeeded":
                    break
                if time.perf_counter() > deadline:
                    raise RuntimeError("latency sample did not run in 10 s")
                time.sleep(0.001)
            gaps.append((info.result["started"] - committed) * 1000)
            time.sleep(0.02)  # idle again before the next sample
    finally:
        if worker is not None:
            worker.stop()
        stop_workers(procs)
        rt.close()
    return gaps


def latency_summary(values: list[float]) -> dict[str, float]:
    """p50, p99 and max (ms) and the number of samples; empty without samples."""
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    return {
        "p50": round(at(0.5), 2),
        "p99": round(at(0.99), 2),
        "max": round(ordered[-1], 2),
        "samples": len(ordered),
    }


def idle_cpu(env: BenchEnv, seconds: float = 5.0) -> float:
    """Percent of a core an idle worker process uses."""
    procs = spawn_workers(env, 1, 4, 4)
    try:
        time.sleep(0.5)
        pid = procs[0].pid
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        before, t0 = cpu(), time.perf_counter()
        time.sleep(seconds)
        return 100 * (cpu() - before) / (time.perf_counter() - t0)
    finally:
        stop_workers(procs)
