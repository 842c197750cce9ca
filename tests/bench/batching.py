"""Tasks per second with a batch handler against one-at-a-time tasks, same machine,
same run (issue 13 item 9). Not part of the test run. Usage, from the project's
virtual environment:

    python tests/bench/batching.py --tasks 2000 --repeats 3 --call-ms 0 2

For each per-call cost (``--call-ms``: what one call of the handler costs, e.g.
one request to a bulk API, whatever its item count; 0 = a no-op) it runs, in
interleaved order, a worker draining ``--tasks`` tasks of a one-at-a-time tool
and of a batch tool (``max_batch=50``), each on a fresh SQLite file with durable
commits, the tasks enqueued before the clock starts. It prints the median
tasks/s of ``--repeats`` runs of each, the ratio, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentq import BatchContext, Runtime, ToolContext, tool

COST = {"seconds": 0.0}


class Item(BaseModel):
    n: int


class Done(BaseModel):
    n: int


@tool(queue="single")
def one_at_a_time(ctx: ToolContext, args: Item) -> Done:
    if COST["seconds"]:
        time.sleep(COST["seconds"])
    return Done(n=args.n)


@tool(queue="bulk", batch=True, max_batch=50)
def batched(ctx: BatchContext, items: list[Item]) -> list[Done]:
    if COST["seconds"]:
        time.sleep(COST["seconds"])
    return [Done(n=i.n) for i in items]


def run(tool_name: str, tasks: int, concurrency: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(f"sqlite:///{Path(tmp) / 'bench.db'}", tools=[one_at_a_time, batched])
        try:
            rt.transact(lambda tx: [tx.enqueue(tool_name, {"n": i}) for i in range(tasks)])
            worker = rt.worker(concurrency=concurrency, queues=[rt.tools.get(tool_name).queue])
            start = time.perf_counter()
            done = worker.drain()
            elapsed = time.perf_counter() - start
            assert done == tasks, (done, tasks)
            assert worker.stats["succeeded"] == tasks, dict(worker.stats)
            return tasks / elapsed
        finally:
            rt.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--call-ms", type=float, nargs="+", default=[0.0, 2.0])
    opts = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    for cost in opts.call_ms:
        COST["seconds"] = cost / 1000
        single: list[float] = []
        batch: list[float] = []
        for _ in range(opts.repeats):  # interleaved: the machine's load hits both alike
            single.append(run("one_at_a_time", opts.tasks, opts.concurrency))
            batch.append(run("batched", opts.tasks, opts.concurrency))
        s, b = statistics.median(single), statistics.median(batch)
        print(f"call cost {cost:g} ms, {opts.tasks} tasks, concurrency {opts.concurrency}: "
              f"one-at-a-time {s:,.0f} tasks/s, batch handler (max_batch 50) {b:,.0f} tasks/s, "
              f"x{b / s:.1f}  (runs: {[round(x) for x in single]} vs {[round(x) for x in batch]})")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
