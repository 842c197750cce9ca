"""The bench's fixtures: a fresh database with no-op tools, and worker processes.

Every measurement gets its own :class:`BenchEnv` (a temporary directory with a
new database file and a tools folder), so no figure is read off a database an
earlier one has grown. Workers run in processes of their own, as in production.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH_QUEUE",
    "OTHER_QUEUES",
    "BenchEnv",
    "enqueue_burst",
    "spawn_workers",
    "stop_workers",
]

#: The queue of the no-op tool every throughput figure runs.
BENCH_QUEUE = "bench"
#: Queues of the idle tools beside it, for the multi-queue figure: with the
#: runtime's own escalations queue, a worker serving every queue serves four.
OTHER_QUEUES = ("bench_b", "bench_c")

_NOOP_TOOL = """
import time
from pydantic import BaseModel
from agentq import ToolContext, tool

class NoopArgs(BaseModel):
    n: int = 0
    pad: str = ""

class NoopResult(BaseModel):
    started: float

@tool(queue="bench")
def noop(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())

@tool(queue="bench_b")
def idle_b(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())

@tool(queue="bench_c")
def idle_c(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())
"""

# argv: url, tools, concurrency, batch, queues ("" = every queue the tools use)
_WORKER = """
import sys, signal, threading
from agentq import Runtime
url, tools, concurrency, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
queues = sys.argv[5].split(",") if sys.argv[5] else None
rt = Runtime(url, tools=tools)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
w = rt.worker(concurrency=concurrency, batch_size=batch, queues=queues)
print("ready", flush=True)
w.run(stop)
rt.close()
"""


class BenchEnv:
    """A fresh database file and the no-op tools, in a temporary directory."""

    def __init__(self, root: Path, durability: str, name: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
        self.tools = self.dir / "tools"
        self.tools.mkdir()
        (self.tools / "noop.py").write_text(_NOOP_TOOL)
        self.path = self.dir / "bench.db"
        self.url = f"sqlite:///{self.path}?durability={durability}"

    def runtime(self) -> Any:
        from agentq.runtime import Runtime

        return Runtime(self.url, tools=self.tools)


def enqueue_burst(rt: Any, n: int, pad: str) -> None:
    """``n`` no-op tasks, a thousand per transaction (enqueue speed is measured
    elsewhere: this only fills the queue)."""
    for first in range(0, n, 1000):
        rt.transact(
            lambda tx, c=first: [
                tx.enqueue("noop", {"n": i, "pad": pad}) for i in range(c, min(c + 1000, n))
            ]
        )


def spawn_workers(
    env: BenchEnv,
    count: int,
    concurrency: int,
    batch: int,
    queues: Sequence[str] | None = (BENCH_QUEUE,),
) -> list[subprocess.Popen[str]]:
    """Start ``count`` worker processes serving ``queues`` (None: every queue)
    and wait until each is ready."""
    served = "" if queues is None else ",".join(queues)
    argv = [sys.executable, "-c", _WORKER, env.url, str(env.tools), str(concurrency), str(batch)]
    procs = [
        subprocess.Popen([*argv, served], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "ready":
            err = p.stderr.read() if p.stderr else ""
            stop_workers(procs)
            raise RuntimeError(f"bench worker failed to start: {line} {err[-2000:]}")
    return procs


def stop_workers(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM every worker and wait for it (killed after 30 s)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
