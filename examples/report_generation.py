"""Long-running work with lease renewal: a report that takes minutes.

A lease lasts 10 s. While the report's handler works (five minutes, on a fake
clock), the worker's lease monitor renews the lease every ~7.5 s, so the task
is never redelivered to another worker meanwhile.

Then a worker dies mid-report. Here that worker is an in-process Worker object
whose handler raises ``agentq.faults.WorkerCrash`` two minutes in: the run is
dropped without committing anything and its lease is no longer renewed, which
is what a SIGKILLed process leaves behind (``agentq demo`` and
``tests/chaos`` kill real worker processes). Once the lease expires the report
is redelivered and a second worker generates it.
"""

# expect: report r-1: succeeded after 300 s of work, 1 delivery, lease renewed at least 30 times
# expect: while it ran, another worker found nothing to do: True
# expect: report r-2: the first worker died 120 s in; redelivered: succeeded on delivery 2

from __future__ import annotations

import threading
import time

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.faults import WorkerCrash

SECONDS_OF_WORK = 300
DIE_AT: dict[str, int] = {}  # report id -> second at which its first worker dies


class Report(BaseModel):
    report_id: str


class Generated(BaseModel):
    report_id: str
    seconds: int


@tool(queue="reports", timeout=3600)
def generate_report(ctx: ToolContext, args: Report) -> Generated:
    for second in range(SECONDS_OF_WORK):
        if DIE_AT.get(args.report_id) == second:
            del DIE_AT[args.report_id]  # only the first worker dies
            raise WorkerCrash(f"worker killed {second} s into {args.report_id}")
        ctx.clock.sleep(1)  # one second of real work per step
    return Generated(report_id=args.report_id, seconds=SECONDS_OF_WORK)


def run_while_advancing(rt: Runtime, clock: FakeClock, task_id: str) -> int:
    """Drain in a thread while moving the fake clock one second at a time (the
    handler and the lease monitor are the two threads that wait on it)."""
    worker = rt.worker(concurrency=1, monitor_interval=1.0)
    thread = threading.Thread(target=worker.drain)
    thread.start()
    idle_elsewhere = True
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        try:
            clock.wait_for_sleepers(2, timeout=0.1)  # the handler reached its next step
        except TimeoutError:
            continue  # not yet, or the drain is over: look again
        clock.advance(1)
        idle_elsewhere &= rt.backend.stats("reports").ready == 0
    thread.join(30)
    return worker.stats["renewed"] if idle_elsewhere else -1


def main() -> None:
    clock = FakeClock()
    rt = Runtime("sqlite:///:memory:", tools=[generate_report], clock=clock)

    first = rt.enqueue_action("generate_report", {"report_id": "r-1"})
    renewed = run_while_advancing(rt, clock, first.task_id)
    info = rt.task(first.task_id)
    print(f"report r-1: {info.status} after {info.result['seconds']} s of work, "
          f"{info.deliveries} delivery, "
          f"lease renewed at least {min(renewed, 30)} times")  # fmt: skip
    print("while it ran, another worker found nothing to do:", renewed >= 0)

    died_at = DIE_AT["r-2"] = 120
    second = rt.enqueue_action("generate_report", {"report_id": "r-2"})
    run_while_advancing(rt, clock, second.task_id)  # the first worker dies
    assert rt.task(second.task_id).status == "running"  # as far as the ledger knows
    clock.advance(10 + rt.backend.redelivery.delay(1, 10))  # its lease expires
    run_while_advancing(rt, clock, second.task_id)
    info = rt.task(second.task_id)
    print(f"report r-2: the first worker died {died_at} s in; redelivered: "
          f"{info.status} on delivery {info.deliveries}")  # fmt: skip
    rt.close()


if __name__ == "__main__":
    main()
