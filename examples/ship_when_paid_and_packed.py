"""Waiting for several events: ship an order once payment and packing are both confirmed.

The shipping task is enqueued with ``after=[payment, packing]``: it is ``waiting``
(no queue message) until both have succeeded, and the transaction that completes
the last of them sends its message — no polling, and two prerequisites finishing
at once in two workers send it exactly once. A second order's payment is refused:
its shipment is cancelled in that same transaction, the reason naming the payment.

On PostgreSQL, by the URL alone: ``AGENTQ_DB=postgresql://user@host/db python
examples/ship_when_paid_and_packed.py`` (an empty database).
"""

# expect: order 1 shipment after payment: waiting on 1 task(s)
# expect: order 1 shipment: succeeded {'shipped': 'o1'}
# expect: order 2 shipment: cancelled because task
# expect: ran: pay o1, pack o1, ship o1, pack o2

from __future__ import annotations

import os

from pydantic import BaseModel

from agentq import FakeClock, PermanentError, Runtime, ToolContext, tool

#: Where agentq keeps its state: sqlite:///:memory:, or AGENTQ_DB (a postgresql:// URL).
DB = os.environ.get("AGENTQ_DB") or "sqlite:///:memory:"

RAN: list[str] = []


class Order(BaseModel):
    order_id: str


@tool(queue="orders")
def confirm_payment(ctx: ToolContext, args: Order) -> dict[str, str]:
    if args.order_id == "o2":
        raise PermanentError("card declined")
    RAN.append(f"pay {args.order_id}")
    return {"paid": args.order_id}


@tool(queue="warehouse")
def confirm_packing(ctx: ToolContext, args: Order) -> dict[str, str]:
    RAN.append(f"pack {args.order_id}")
    return {"packed": args.order_id}


@tool(queue="shipping")
def ship(ctx: ToolContext, args: Order) -> dict[str, str]:
    RAN.append(f"ship {args.order_id}")
    return {"shipped": args.order_id}


def place(rt: Runtime, order_id: str) -> str:
    """One decision: both confirmations and the shipment that waits for them."""

    def decide(tx) -> str:  # type: ignore[no-untyped-def]
        paid = tx.enqueue("confirm_payment", {"order_id": order_id})
        packed = tx.enqueue("confirm_packing", {"order_id": order_id})
        return tx.enqueue("ship", {"order_id": order_id}, after=[paid, packed]).task_id

    return rt.transact(decide)


def main() -> None:
    rt = Runtime(DB, tools=[confirm_payment, confirm_packing, ship],
                 clock=FakeClock())  # fmt: skip
    shipment = place(rt, "o1")
    rt.worker(queues=["orders"]).drain()  # payment confirmed; packing not yet
    waiting = rt.task(shipment)
    print(f"order 1 shipment after payment: waiting on {len(waiting.waiting_on)} task(s)")
    rt.worker(queues=["warehouse", "shipping"]).drain()  # packing sends the shipment
    done = rt.task(shipment)
    print(f"order 1 shipment: {done.status} {done.result}")

    refused = place(rt, "o2")
    rt.worker().drain()
    voided = rt.task(refused)
    print(f"order 2 shipment: {voided.status} because {voided.error}")
    print("ran: " + ", ".join(RAN))
    rt.close()


if __name__ == "__main__":
    main()
