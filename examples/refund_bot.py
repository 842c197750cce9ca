"""The refund bot in a few lines: decide, approve, execute, escalate.

Runs on an in-memory database with a fake clock, so the 72-hour escalation
happens instantly. `agentq demo` is the full version with a real worker crash.

On PostgreSQL, by the URL alone: ``AGENTQ_DB=postgresql://user@host/db python
examples/refund_bot.py`` (an empty database).
"""

# expect: small refund: succeeded
# expect: large refund after approval: succeeded
# expect: unanswered approval: escalated
# expect: refunds charged: 2

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from agentq import Decision, FakeClock, Runtime
from agentq.testing import LoopbackAPI

#: Where agentq keeps its state: sqlite:///:memory:, or AGENTQ_DB (a postgresql:// URL).
DB = os.environ.get("AGENTQ_DB") or "sqlite:///:memory:"

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    clock = FakeClock()
    with LoopbackAPI() as api:
        urls = {"payments_url": api.url, "notifications_url": api.url}
        rt = Runtime(DB, tools=ROOT / "tools", policies=ROOT / "policies",
                     clock=clock, settings=urls)  # fmt: skip
        rt.transact(lambda tx: tx.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT)"))

        def decide(order: str, amount: float):  # the agent's decision, atomically
            def fn(tx: Decision):
                tx.execute("INSERT INTO orders VALUES (?, 'refund_decided')", (order,))
                return tx.enqueue("execute_refund", {"order_id": order, "amount": amount})

            return rt.transact(fn)

        small = decide("A-1", 30)
        large = decide("A-2", 450)  # needs a human: the policy says > 100
        forgotten = decide("A-3", 700)  # nobody will answer this one
        worker = rt.worker()
        worker.drain()
        print("small refund:", rt.task(small.task_id).status)
        print("large refund:", rt.task(large.task_id).status)

        rt.approve(large.approval_id, by="alice")  # deletes its escalation in the same tx
        worker.drain()
        print("large refund after approval:", rt.task(large.task_id).status)

        clock.advance(timedelta(hours=72))  # the escalation timer fires
        worker.drain()
        print("unanswered approval:", rt.approval(forgotten.approval_id).status)
        print("escalations sent:", api.requests("/escalations"))
        print("refunds charged:", len(api.applied()))
        rt.close()


if __name__ == "__main__":
    main()
