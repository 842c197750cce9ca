"""Processing: no-op tasks leased, run and completed by worker processes.

A burst of tasks is enqueued first, then the workers start; the figure is the
tasks' handler start times, first to last ((n - 1) / span), so neither enqueue
speed nor process start-up is in it (the method of
``tests/bench/compare_huey.py``, so the two are comparable). Every task's
result is recorded in the ledger atomically with its ack, as always; a run in
which any task did not succeed is an error, not a figure.

* ``tasks_per_s_<n>w`` — ``n`` worker processes serving the bench queue;
* ``tasks_per_s_multi_queue`` — one worker serving every queue of the project
  (the default ``agentq worker``: here four, one of them busy), to read beside
  ``tasks_per_s_1w``;
* ``tasks_per_s_<n>w_args_<b>B`` — ``n`` workers, tasks with ``b`` bytes of
  arguments (``--args-sizes``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agentq.bench.env import BENCH_QUEUE, BenchEnv, enqueue_burst, spawn_workers, stop_workers

__all__ = ["drain", "end_to_end"]

_DEADLINE_SECONDS = 600.0


def end_to_end(
    env: BenchEnv,
    n: int,
    workers: int,
    concurrency: int,
    batch: int,
    pad: str,
    queues: Sequence[str] | None = (BENCH_QUEUE,),
) -> float:
    """Tasks/s of ``workers`` processes serving ``queues`` (None: every queue)."""
    rt = env.runtime()
    try:
        enqueue_burst(rt, n, pad)
        return drain(env, rt, n, workers, concurrency, batch, queues)
    finally:
        rt.close()


def drain(
    env: BenchEnv,
    rt: Any,
    n: int,
    workers: int,
    concurrency: int,
    batch: int,
    queues: Sequence[str] | None = (BENCH_QUEUE,),
) -> float:
    """Start ``workers`` processes on the ``n`` tasks already enqueued, wait until
    the bench queue is empty, stop them; tasks/s from the handlers' start times."""
    procs = spawn_workers(env, workers, concurrency, batch, queues)
    try:
        deadline = time.monotonic() + _DEADLINE_SECONDS
        while rt.backend.stats(BENCH_QUEUE).depth > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench tasks did not finish in {_DEADLINE_SECONDS:.0f} s")
            # The rate is read off start times: no need to look often. Each look
            # counts the queue's rows on the server the workers share (on
            # PostgreSQL up to 3 ms of its CPU with 10,000 queued, measured on a
            # busy machine: a few percent of a core at one look every 50 ms).
            time.sleep(0.25)
    finally:
        stop_workers(procs)
    starts = sorted(t.result["started"] for t in rt.tasks("succeeded"))
    if len(starts) != n:
        raise RuntimeError(f"only {len(starts)} of {n} bench tasks succeeded")
    span = starts[-1] - starts[0] if n > 1 else 0.0
    return (n - 1) / span if span > 0 else float(n)
