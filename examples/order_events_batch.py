"""Temporal batching: order events aggregated per 10-second window.

Producers enqueue one task per order event. The tool's ``batch_window = 10s``
rounds every task's delivery time up to the end of its window, so the events
of a window become ready together; the batch handler gets them in one call and
all their results, their acks and the aggregate row commit in one transaction.
An event the handler cannot take yet is retried alone.
"""

# expect: window 1: 4 events in 1 call, total 100
# expect: window 2: 3 events in 1 call, total 60
# expect: the late event was retried alone and succeeded
# expect: 8 tasks, 8 succeeded, 3 batch commits

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel

from agentq import BatchContext, FakeClock, Runtime, TaskStatus, tool

CALLS: list[int] = []


class OrderEvent(BaseModel):
    order_id: str
    amount: int


class Counted(BaseModel):
    order_id: str
    window_total: int


@tool(queue="order_events", batch=True, max_batch=50, batch_window="10s")
def aggregate_orders(ctx: BatchContext, events: list[OrderEvent]) -> list[Counted | Exception]:
    """Add a window's order events to the per-window totals table."""
    CALLS.append(len(events))
    # The late event's stock record is not there on its first attempt.
    pairs = zip(events, ctx.tasks, strict=True)
    ready = [e for e, task in pairs if e.order_id != "o-late" or task.attempt > 1]
    total = sum(e.amount for e in ready)
    now = ctx.clock.now().isoformat()
    ctx.on_commit(lambda tx: tx.execute("INSERT INTO totals VALUES (?, ?, ?)",
                                        (now, len(ready), total)))  # fmt: skip
    return [
        Counted(order_id=e.order_id, window_total=total) if e in ready
        else LookupError(f"no stock record for {e.order_id} yet")  # retried alone
        for e in events
    ]  # fmt: skip


def main() -> None:
    clock = FakeClock(datetime(2026, 12, 1, 9, 5, 1, tzinfo=UTC))
    rt = Runtime("sqlite:///:memory:", tools=[aggregate_orders], clock=clock)
    rt.transact(lambda tx: tx.execute("CREATE TABLE totals (at TEXT, events INT, total INT)"))
    ids = []
    for amount in (10, 20, 30, 40):  # 09:05:01 .. 09:05:07: all due at 09:05:10
        ids.append(rt.enqueue_action("aggregate_orders", {"order_id": f"o-{amount}",
                                                          "amount": amount}).task_id)
        clock.advance(2)
    worker = rt.worker()
    assert worker.drain() == 0  # nothing is ready before the window ends
    clock.advance(1)  # 09:05:10
    worker.drain()
    for amount, oid in ((5, "o-5"), (25, "o-25"), (30, "o-30"), (99, "o-late")):
        event = {"order_id": oid, "amount": amount}
        ids.append(rt.enqueue_action("aggregate_orders", event).task_id)
    clock.advance(10)  # 09:05:20
    worker.drain()
    clock.advance(5)  # the late event's retry (backoff: at most 1 s)
    worker.drain()
    rows = rt.transact(lambda tx: tx.execute("SELECT events, total FROM totals ORDER BY at"))
    for n, (events, total) in enumerate(rows[:2], start=1):
        print(f"window {n}: {events} events in 1 call, total {total}")
    late = rt.task(ids[-1])
    if late.status is TaskStatus.SUCCEEDED and late.attempt == 2 and rows[2] == (1, 99):
        print("the late event was retried alone and succeeded")
    statuses = [rt.task(i).status for i in ids]
    succeeded = sum(s is TaskStatus.SUCCEEDED for s in statuses)
    print(f"{len(ids)} tasks, {succeeded} succeeded, {worker.stats['batch_commits']} batch commits")
    rt.close()


if __name__ == "__main__":
    main()
