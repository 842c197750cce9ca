"""Long work in checkpoints: ack + re-send with a future delivery time.

A handler that processes a large export in chunks returns a checkpoint after each
chunk; the runtime acks this delivery and sends the task again (new key, so a
stale worker can never ack it) carrying the progress, in one transaction.
"""

# expect: succeeded: {'rows': 4500, 'deliveries': 5} after 5 deliveries

from __future__ import annotations

from pydantic import BaseModel

from agentq import Checkpoint, FakeClock, Runtime, ToolContext, tool


class Export(BaseModel):
    rows: int
    chunk: int = 1000


class Exported(BaseModel):
    rows: int
    deliveries: int


@tool(queue="exports")
def export_rows(ctx: ToolContext, args: Export) -> Exported | Checkpoint:
    state = ctx.checkpoint_state or {"done": 0, "deliveries": 0}
    done = min(state["done"] + args.chunk, args.rows)  # ... process one chunk here ...
    deliveries = state["deliveries"] + 1
    if done < args.rows:
        return ctx.checkpoint({"done": done, "deliveries": deliveries}, after=1)
    return Exported(rows=done, deliveries=deliveries)


def main() -> None:
    clock = FakeClock()
    rt = Runtime("sqlite:///:memory:", tools=[export_rows], clock=clock)
    task = rt.enqueue_action("export_rows", {"rows": 4500})
    while not rt.task(task.task_id).done:
        rt.worker().drain()
        clock.advance(1)
    info = rt.task(task.task_id)
    print(f"{info.status}: {info.result} after {info.attempt} deliveries")
    rt.close()


if __name__ == "__main__":
    main()
