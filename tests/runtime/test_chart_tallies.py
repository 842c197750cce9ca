"""Issue 38 item 1: every completion that ends an action task succeeded or dead
adds it to the per-minute tallies (the console's chart) in its own
transaction, on every backend: a worker's plain successes (a group's at once;
on PostgreSQL the swap of the whole record), a failure for good; a cancelled
task is not counted. A prune deletes them once two days old."""

from __future__ import annotations

from pathlib import Path

from agentq import FakeClock, Runtime, TaskStatus
from agentq.lifecycle import tallies

_TOOLS = """
from pydantic import BaseModel
from agentq import PermanentError, ToolContext, tool

class Args(BaseModel):
    n: int

@tool(queue="tally")
def fine(ctx: ToolContext, args: Args) -> dict[str, int]:
    return {"n": args.n}

@tool(queue="tally")
def broken(ctx: ToolContext, args: Args) -> dict[str, int]:
    raise PermanentError("never works")
"""


def test_completions_add_their_tallies(backend_url: str, clock: FakeClock, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "tally.py").write_text(_TOOLS)
    rt = Runtime(backend_url, tools=tools, clock=clock)
    try:
        minute = tallies.minute_of(clock.now())
        rt.transact(lambda tx: [tx.enqueue("fine", {"n": i}) for i in range(3)])
        rt.enqueue_action("fine", {"n": 9}, by="agent")
        rt.enqueue_action("broken", {"n": 0})
        gone = rt.enqueue_action("fine", {"n": 7})
        rt.cancel(gone.task_id)
        assert rt.worker(queues=["tally"]).drain() == 5
        assert rt.task(gone.task_id).status == TaskStatus.CANCELLED
        got = {(t.outcome, t.bucket): t.count for t in rt.backend.read_tallies(minute, minute + 1)}
        # The fake clock stands still while they run: each ran in under 1 ms.
        assert got == {("succeeded", 0): 4, ("dead", 0): 1}
        mine = rt.backend.read_tallies(minute, minute + 1, owner="agent")
        assert [(t.outcome, t.count) for t in mine] == [("succeeded", 1)]
        clock.advance(2 * 86400 - 120)
        rt.prune()  # kept for two days (longer than the chart's day), then deleted
        assert len(rt.backend.read_tallies(minute, minute + 1)) == 2
        clock.advance(180)
        rt.prune()
        assert rt.backend.read_tallies(minute, minute + 1) == []
    finally:
        rt.close()


def test_a_serving_worker_deletes_old_tallies_with_retention_off(
    backend_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """Tasks kept forever still leave the chart's bookkeeping bounded: the
    worker's pruner deletes tallies past two days (on PostgreSQL, folding the
    changes every completion appends) though it has no task to prune. It
    returned at once with retention off, so they grew with every completion."""
    from agentq.executor.pruning import Pruner

    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "tally.py").write_text(_TOOLS)
    rt = Runtime(backend_url, tools=tools, clock=clock, retention="off")
    try:
        minute = tallies.minute_of(clock.now())
        rt.enqueue_action("fine", {"n": 1})
        worker = rt.worker(queues=["tally"])
        assert worker.drain() == 1
        assert len(rt.backend.read_tallies(minute, minute + 1)) == 1
        clock.advance(2 * 86400 + 120)
        Pruner(worker, 60).prune_once()
        assert rt.backend.read_tallies(minute, minute + 1) == []
    finally:
        rt.close()
