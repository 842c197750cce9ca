"""How often a worker's stages wake each other (issue 38 item 3: fewer thread
hand-offs per task).

The stages share one condition. Every finished run used to ``notify_all`` it,
waking whatever waited, although only a receiver waiting for room can act on a
run's end (the other waiters wait for nothing in flight and no commit pending,
and the run's commit is pending then). Now a finished run wakes them when it
frees the worker's first slot; claims and commits wake them as before.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool


class Nothing(BaseModel):
    n: int = 0


@tool(queue="handoff_q")
def handoff(ctx: ToolContext, args: Nothing) -> None:
    return None


class CountingCondition(threading.Condition):
    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def notify_all(self) -> None:
        self.notified += 1
        super().notify_all()


def _drain(tmp_path: Path, tasks: int, **options: Any) -> tuple[int, int]:
    """Wake-ups of the shared condition while a worker drains ``tasks`` tasks, and
    how many it finished."""
    rt = Runtime(f"sqlite:///{tmp_path / 'handoffs.db'}", tools=[handoff], clock=FakeClock())
    try:
        rt.transact(lambda tx: [tx.enqueue("handoff", {"n": i}) for i in range(tasks)])
        worker = rt.worker(queues=["handoff_q"], group_commit=tasks, **options)
        condition = CountingCondition()
        worker._lock = condition
        worker.drain()
        return condition.notified, len(rt.tasks("succeeded"))
    finally:
        rt.close()


def test_finished_runs_do_not_wake_the_stages_one_by_one(tmp_path: Path) -> None:
    # Room for every task: no receiver ever waits for a slot. Before: one wake-up
    # per task (30) besides the claims' and the commits'.
    notified, done = _drain(tmp_path, 30, concurrency=4, batch_size=30)
    assert done == 30
    assert notified < 15


def test_a_full_worker_is_woken_when_a_slot_frees(tmp_path: Path) -> None:
    # One slot, and a serving worker (a drain leases whatever is ready at once):
    # its receiver waits for room after each lease, and each run's end frees it.
    rt = Runtime(f"sqlite:///{tmp_path / 'full.db'}", tools=[handoff])
    try:
        rt.transact(lambda tx: [tx.enqueue("handoff", {"n": i}) for i in range(6)])
        worker = rt.worker(
            queues=["handoff_q"], concurrency=1, batch_size=1, prefetch=0, receive_timeout=0.05
        )
        condition = CountingCondition()
        worker._lock = condition
        stop = threading.Event()
        serving = threading.Thread(target=worker.run, args=(stop,))
        serving.start()
        try:
            for _ in range(3000):  # a bound for a broken worker, not a measurement
                if len(rt.tasks("succeeded")) == 6:
                    break
                threading.Event().wait(0.01)
        finally:
            stop.set()
            serving.join(30)
        assert len(rt.tasks("succeeded")) == 6
        assert condition.notified >= 6
    finally:
        rt.close()
