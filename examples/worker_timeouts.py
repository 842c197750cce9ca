"""Worker heartbeats as a runtime feature: a worker that stops beating is reported once.

Every serving worker keeps one message in the ``worker_heartbeats`` queue, due
at its deadline; each beat acks it and sends its replacement in one
transaction. A worker that dies leaves its message to come due: another worker
receives it, marks it ``lost`` (``agentq workers``) and enqueues the policy's
alert tool, exactly once. A clean stop deletes the message: no alert.

Here three workers share one SQLite file and a fake clock, and the beats that
``Worker.run`` makes every 5 s on its own are made by hand, so the 30 s timeout
passes instantly. (``examples/heartbeat.py`` shows the same pattern on the raw
queue API.)
"""

# expect: t=40s: worker-a (killed at t=10s) is lost; worker-b is live
# expect: worker-c stopped cleanly: no alert for it
# expect: alerts: ['worker-a timed out after 30s']

from __future__ import annotations

import tempfile
from pathlib import Path

from agentq import FakeClock, Runtime, ToolContext, WorkerDown, tool
from agentq.executor.heartbeat import Heartbeat

ALERTS: list[str] = []


@tool(queue="ops", internal=True)
def worker_down(ctx: ToolContext, args: WorkerDown) -> None:
    """The alert tool (the policy's ``worker_alert_tool``, default ``worker_down``)."""
    ALERTS.append(f"{args.worker_id} timed out after {args.timeout_s:g}s")


def main() -> None:
    clock = FakeClock()
    db = f"sqlite:///{Path(tempfile.mkdtemp()) / 'agentq.db'}"
    runtimes = [Runtime(db, tools=[worker_down], clock=clock) for _ in range(3)]
    names = ("worker-a", "worker-b", "worker-c")
    a, b, c = (Heartbeat(rt.worker(), 5.0, None, timeout=30.0, worker_id=name)
               for rt, name in zip(runtimes, names, strict=True))  # fmt: skip

    def beat(seconds: int, *beating: Heartbeat) -> None:
        for _ in range(seconds // 5):
            clock.advance(5)
            for hb in beating:
                hb.publish()
                hb.check_others()

    for hb in (a, b, c):
        hb.publish()
    beat(10, a, b, c)  # t=10s: worker-a is killed (it never beats again)
    c.stop()  # worker-c stops cleanly: its heartbeat message is deleted
    beat(30, b)  # t=40s: worker-a's deadline (its last beat + 30 s) has come
    status = {w.worker_id: w.status for w in runtimes[1].workers()}
    print(f"t=40s: worker-a (killed at t=10s) is {status['worker-a']}; "
          f"worker-b is {status['worker-b']}")  # fmt: skip
    beat(60, b)
    runtimes[1].worker().drain()  # runs the alert task
    if not any("worker-c" in alert for alert in ALERTS) and "worker-c" not in status:
        print("worker-c stopped cleanly: no alert for it")
    print("alerts:", ALERTS)
    for rt in runtimes:
        rt.close()


if __name__ == "__main__":
    main()
