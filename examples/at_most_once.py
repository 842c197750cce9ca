"""At-most-once long work: ack the delivery and re-send it for after the timeout.

``@tool(at_most_once=True, timeout=...)``: before the handler starts, the task's
message is acked and sent again, in one transaction, for after the timeout plus a
margin (its *horizon*). No lease is renewed while it runs, and no worker can start
it again before the horizon, even if this one dies. Completion acks the re-sent
message. If it comes back — the worker died mid-run — the outcome is unknown: the
tool's ``reconcile`` handler would look it up; this one has none, so the task is
parked as ``outcome_unknown`` until an operator resolves it. It never runs twice
on its own.
"""

# expect: render r1: succeeded after 1 run(s), 0 lease renewals
# expect: render r2, 15 min after its worker died: running, runs started: 1
# expect: render r2, past its horizon of 1320 s: outcome_unknown
# expect: after the operator's retry: succeeded, runs started: 2

from __future__ import annotations

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, WorkerCrash, tool
from agentq.executor.guarded import horizon

STARTED: list[str] = []


class Render(BaseModel):
    video: str


@tool(queue="renders", at_most_once=True, timeout=1200)
def render_video(ctx: ToolContext, args: Render) -> dict[str, str]:
    STARTED.append(args.video)  # ... twenty minutes of GPU time, not to be doubled ...
    return {"rendered": args.video}


def main() -> None:
    clock = FakeClock()
    rt = Runtime("sqlite:///:memory:", tools=[render_video], clock=clock)

    first = rt.enqueue_action("render_video", {"video": "r1"})
    worker = rt.worker()
    worker.drain()
    info = rt.task(first.task_id)
    renewals = worker.stats.get("renewed", 0)
    print(f"render r1: {info.status} after {STARTED.count('r1')} run(s), {renewals} lease renewals")

    second = rt.enqueue_action("render_video", {"video": "r2"})
    rt.faults.arm("after_external_call", WorkerCrash())  # the worker dies mid-render
    rt.worker().drain()
    clock.advance(15 * 60)  # leases would have expired long ago
    rt.worker().drain()
    print(f"render r2, 15 min after its worker died: {rt.task(second.task_id).status}, "
          f"runs started: {STARTED.count('r2')}")  # fmt: skip

    held = horizon(1200).total_seconds()
    clock.advance(held)
    rt.worker().drain()
    print(f"render r2, past its horizon of {held:.0f} s: {rt.task(second.task_id).status}")

    rt.resolve(second.task_id, "retry", by="ops", note="the render farm has no output for it")
    rt.worker().drain()
    print(f"after the operator's retry: {rt.task(second.task_id).status}, "
          f"runs started: {STARTED.count('r2')}")  # fmt: skip
    rt.close()


if __name__ == "__main__":
    main()
