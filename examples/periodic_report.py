"""A periodic report: ``@tool(every="1h")``, with no drift and downtime skipped.

The worker seeds the schedule's first run when it starts. Each run's completion
transaction acks it and sends the next run for the slot after the run's own
slot (not after the time it finished), so late starts never shift the hours.
A run that fails is retried by its tool's policy, and the schedule goes on.
After an outage the pending run stands in for the missed hours, which are
skipped (``catch_up=N`` would run the latest N of them instead).
"""

# expect: 01:00 report for 00:00-01:00: 2 orders (ran at 01:07)
# expect: 02:00 report failed: the warehouse is not answering
# expect: 02:00 report for 01:00-02:00: 1 orders (ran at 02:01)
# expect: 03:00 report for 02:00-03:00: 0 orders (ran at 03:00)
# expect: workers down from 03:30 to 07:20
# expect: 04:00 report for 03:00-04:00: 3 orders (ran at 07:20)
# expect: 08:00 report for 07:00-08:00: 1 orders (ran at 08:00)
# expect: schedule hourly_sales: every 1h, 5 runs, 3 missed, next at 09:00

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool

ORDERS_AT = ["00:10", "00:40", "01:30", "03:10", "03:20", "03:50", "07:30"]
BROKEN = {"02:00"}  # the warehouse fails the first attempt of this run


class Sales(BaseModel):
    store: str = "main"


@tool(queue="reports", every="1h", max_attempts=3)
def hourly_sales(ctx: ToolContext, args: Sales) -> None:
    slot = ctx.scheduled_for  # the hour this run stands for, however late it runs
    assert slot is not None
    label = f"{slot:%H:%M}"
    if label in BROKEN and ctx.attempt == 1:
        print(f"{label} report failed: the warehouse is not answering")
        raise ConnectionError("the warehouse is not answering")
    start = slot - timedelta(hours=1)
    orders = sum(1 for t in ORDERS_AT if f"{start:%H:%M}" <= t < label)
    print(f"{label} report for {start:%H:%M}-{label}: {orders} orders "
          f"(ran at {ctx.clock.now():%H:%M})")  # fmt: skip


def main() -> None:
    clock = FakeClock(datetime(2026, 3, 2, tzinfo=UTC))
    rt = Runtime("sqlite:///:memory:", tools=[hourly_sales], clock=clock)
    worker = rt.worker()
    worker.drain()  # a worker starting: the schedule's first run is sent for 01:00

    def at(hhmm: str) -> None:
        hours, minutes = map(int, hhmm.split(":"))
        clock.set(datetime(2026, 3, 2, hours, minutes, tzinfo=UTC))
        worker.drain()

    for moment in ("01:07", "02:00", "02:01", "03:00"):
        at(moment)
    print("workers down from 03:30 to 07:20")
    for moment in ("07:20", "08:00"):
        at(moment)
    [info] = rt.schedules()
    assert info.next_run is not None
    print(f"schedule {info.name}: {info.rule}, {info.runs} runs, {info.missed} missed, "
          f"next at {info.next_run:%H:%M}")  # fmt: skip
    rt.close()


if __name__ == "__main__":
    main()
