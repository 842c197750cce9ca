"""Ordering keys: per-order steps run one at a time, in order (Pub/Sub's ordering rules).

Steps of one order share an ordering key; different orders run in parallel.
Only the key's first unfinished task has a queue message, so:

* a step that fails is retried before any later step of its order runs (o-1);
* a step whose worker dies is redelivered once its lease expires, and every
  later step of its order waits for that redelivery (o-2), as a Pub/Sub
  redelivery brings the later messages of its key after it;
* a step that is dead-lettered **releases its key**: the later steps run
  without it (o-3). Pub/Sub says the same of dead-letter topics: a message
  written there no longer holds the order. A replayed dead letter queues
  again behind the key's waiting tasks.

On PostgreSQL, by the URL alone: ``AGENTQ_DB=postgresql://user@host/db python
examples/ordering.py`` (an empty database).
"""

# expect: o-2 after its worker died: charge running, ship queued behind it
# expect: o-1: reserve -> charge -> ship (charge failed once and was retried first)
# expect: o-2: reserve -> charge -> ship (charge was redelivered first)
# expect: o-3: reserve -> ship (charge was dead-lettered; the key was released)
# expect: each order's steps ran in order

from __future__ import annotations

import os

from pydantic import BaseModel

from agentq import FakeClock, PermanentError, Runtime, ToolContext, tool
from agentq.faults import WorkerCrash

#: Where agentq keeps its state: sqlite:///:memory:, or AGENTQ_DB (a postgresql:// URL).
DB = os.environ.get("AGENTQ_DB") or "sqlite:///:memory:"

LOG: list[str] = []
CRASHED: set[str] = set()


class Step(BaseModel):
    order: str
    step: str


@tool(queue="orders")
def order_step(ctx: ToolContext, args: Step) -> None:
    if args.step == "charge":
        if args.order == "o-1" and ctx.attempt == 1:
            raise RuntimeError("card network timeout")  # retried; later steps wait
        if args.order == "o-2" and "o-2" not in CRASHED:
            CRASHED.add("o-2")
            raise WorkerCrash("the worker was killed")  # nothing committed: redelivered
        if args.order == "o-3":
            raise PermanentError("card declined")  # dead-lettered at once
    LOG.append(f"{args.order}:{args.step}")


def steps(order: str) -> list[str]:
    return [e.split(":")[1] for e in LOG if e.startswith(f"{order}:")]


def main() -> None:
    clock = FakeClock()
    rt = Runtime(DB, tools=[order_step], clock=clock)
    ids: dict[tuple[str, str], str] = {}

    def decide(tx):
        for order in ("o-1", "o-2", "o-3"):
            for step in ("reserve", "charge", "ship"):
                task = tx.enqueue("order_step", {"order": order, "step": step},
                                  ordering_key=order)  # fmt: skip
                ids[(order, step)] = task.task_id

    rt.transact(decide)
    rt.worker(concurrency=4).drain()
    charge, ship = rt.task(ids[("o-2", "charge")]), rt.task(ids[("o-2", "ship")])
    print(f"o-2 after its worker died: charge {charge.status}, ship {ship.status} behind it")
    assert "ship" not in steps("o-2")
    for _ in range(10):
        clock.advance(5)  # retry backoffs; o-2's lease expires and it is redelivered
        rt.worker(concurrency=4).drain()
    print(" -> ".join(LOG))
    print("o-1:", " -> ".join(steps("o-1")), "(charge failed once and was retried first)")
    print("o-2:", " -> ".join(steps("o-2")), "(charge was redelivered first)")
    print("o-3:", " -> ".join(steps("o-3")),
          "(charge was dead-lettered; the key was released)")  # fmt: skip
    assert steps("o-1") == steps("o-2") == ["reserve", "charge", "ship"], LOG
    assert steps("o-3") == ["reserve", "ship"], LOG
    assert rt.task(ids[("o-3", "charge")]).status == "dead"
    print("each order's steps ran in order")
    rt.close()


if __name__ == "__main__":
    main()
