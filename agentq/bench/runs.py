"""The cost of durability: durable agent runs with an instant scripted model.

Each run takes two turns (the first calls a no-op tool, the second answers) on
the scripted OpenAI-compatible server on loopback, carried by an in-process
worker. Two figures:

* ``runs_per_s`` — runs started at once, from the first start to the last
  run's end (2 turns and 1 tool task each);
* ``turn_overhead_ms`` — per turn of runs carried one at a time, the time
  from the turn task's claim to its completion transaction less the model
  request's own latency: the runtime's bookkeeping of a turn (record read,
  request building, the answer's calls and the run's record written with the
  ack; the commit's own flush is not in it, as the claim's lease is not);
  its p50 is the figure (the issue's target: ≤ 5 ms on SQLite).
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from agentq.agents import Agent, OpenAICompatibleModel
from agentq.bench.env import BenchEnv
from agentq.context import ToolContext
from agentq.scripted_model import ScriptedModel
from agentq.scripted_replies import ModelRequest, Reply
from agentq.tools import tool

__all__ = ["durable_runs"]


class _Step(BaseModel):
    n: int


@tool(queue="bench_run_tools")
def bench_step(ctx: ToolContext, args: _Step) -> dict[str, int]:
    """A tool call that does nothing (the model's call of a run)."""
    return {"n": args.n}


def _script(request: ModelRequest) -> Reply:
    if request.turn == 1:
        return Reply.tool_calls(("bench_step", {"n": 1}))
    return Reply.text("done")


def durable_runs(env: BenchEnv, n: int, concurrency: int) -> dict[str, float]:
    """``n`` two-turn runs through one in-process worker of ``concurrency``
    slots (runs/s), then a tenth as many (at least 10), each started and
    carried alone, so that a turn's overhead is not time spent waiting for a
    slot."""
    from agentq.runtime import Runtime

    with ScriptedModel(_script) as model:
        agent = Agent("bench", OpenAICompatibleModel(model.base_url, "scripted"),
                      tools=["bench_step"])  # fmt: skip
        rt = Runtime(env.url, tools=[bench_step], agents=[agent])
        try:
            elapsed, _ = _drain_runs(rt, n, concurrency)
            # One run at a time: a claimed turn then never waits for a free slot.
            runs = [r for _ in range(max(10, n // 10)) for r in _drain_runs(rt, 1, 1)[1]]
            overheads = [_overhead_ms(rt.task(t.task_id).model_dump(), t.latency_ms)
                         for r in runs for t in r.turns]  # fmt: skip
        finally:
            rt.close()
    return {
        "runs_per_s": n / elapsed,
        "turn_overhead_ms_p50": statistics.median(overheads),
        "turn_overhead_ms_p90": statistics.quantiles(overheads, n=10)[-1],
    }


def _drain_runs(rt: Any, n: int, concurrency: int) -> tuple[float, list[Any]]:
    start = time.perf_counter()
    ids = [rt.start_run("bench", f"run {i}").run_id for i in range(n)]
    rt.worker(concurrency=concurrency, receive_timeout=0.05).drain()
    elapsed = time.perf_counter() - start
    runs = [rt.run(run_id) for run_id in ids]
    failed = [r for r in runs if r.status != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {n} bench runs did not succeed: "
                           f"{failed[0].status} {failed[0].error}")  # fmt: skip
    return elapsed, runs


def _overhead_ms(task: dict[str, Any], model_ms: float | None) -> float:
    started, finished = task.get("started_at"), task.get("finished_at")
    if not isinstance(started, datetime) or not isinstance(finished, datetime):
        raise RuntimeError(f"turn task {task.get('task_id')} has no start or end time")
    return (finished - started).total_seconds() * 1000.0 - (model_ms or 0.0)
