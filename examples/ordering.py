"""Ordering keys: per-order steps run one at a time, in order.

Steps of one order share an ordering key; different orders run in parallel. A
step that fails is retried before any later step of its order runs.
"""

# expect: each order's steps ran in order

from __future__ import annotations

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool

LOG: list[str] = []


class Step(BaseModel):
    order: str
    step: str


@tool(queue="orders")
def order_step(ctx: ToolContext, args: Step) -> None:
    if args.step == "charge" and args.order == "o-1" and ctx.attempt == 1:
        raise RuntimeError("card network timeout")  # retried; later steps wait
    LOG.append(f"{args.order}:{args.step}")


def main() -> None:
    clock = FakeClock()
    rt = Runtime("sqlite:///:memory:", tools=[order_step], clock=clock)

    def decide(tx):
        for order in ("o-1", "o-2"):
            for step in ("reserve", "charge", "ship"):
                tx.enqueue("order_step", {"order": order, "step": step}, ordering_key=order)

    rt.transact(decide)
    for _ in range(10):
        rt.worker(concurrency=4).drain()
        clock.advance(5)
    print(" -> ".join(LOG))
    for order in ("o-1", "o-2"):
        steps = [e.split(":")[1] for e in LOG if e.startswith(order)]
        assert steps == ["reserve", "charge", "ship"], steps
    print("each order's steps ran in order")
    rt.close()


if __name__ == "__main__":
    main()
