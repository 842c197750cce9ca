"""Worker CPU per task: one process drains ``--tasks`` queued no-op tasks.

Not part of the test run. Process CPU (every thread of it) divided by the
tasks drained: a figure a shared machine's load moves far less than tasks/s.
Usage, from the project's virtual environment (compare two checkouts by
running it with each first on ``PYTHONPATH``, interleaved):

    python tests/bench/drain_cpu.py --db sqlite --tasks 3000
    python tests/bench/drain_cpu.py --db 'postgresql://...?schema=cpu1' --tasks 2000

Prints CPU microseconds per task and tasks per second (wall).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from agentq import Runtime

_TOOL = """
from pydantic import BaseModel
from agentq import ToolContext, tool

class Args(BaseModel):
    n: int

@tool(queue="noop")
def noop(ctx: ToolContext, args: Args) -> dict[str, int]:
    return {"n": args.n}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--db", default="sqlite")
    parser.add_argument("--tasks", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentq-drain-") as tmp:
        tools = Path(tmp) / "tools"
        tools.mkdir()
        (tools / "noop.py").write_text(_TOOL)
        url = f"sqlite:///{tmp}/b.db" if args.db == "sqlite" else args.db
        rt = Runtime(url, tools=tools)
        try:
            for first in range(0, args.tasks, 500):
                count = min(500, args.tasks - first)
                rt.transact(lambda tx, f=first, c=count: [
                    tx.enqueue("noop", {"n": f + i}) for i in range(c)])  # fmt: skip
            worker = rt.worker(queues=["noop"])
            cpu, wall = time.process_time(), time.perf_counter()
            done = worker.drain()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            rt.close()
    print(f"cpu_us_per_task {cpu / done * 1e6:.0f} tasks_per_s {done / wall:.0f}")


if __name__ == "__main__":
    main()
