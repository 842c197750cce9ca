"""Per-key concurrency limits: at most 2 refunds in flight per merchant, on every worker.

The policy names an argument (``concurrency_key = "merchant_id"``) and a limit
(``max_in_flight = 2``). Slots are records in the database, taken in the
transaction that claims a task, so two worker processes together still run at
most 2 refunds of one merchant; a task that finds its key's slots taken stays
queued (no attempt used) and is sent again the moment a slot frees.

Here one worker with 8 handler threads gets 6 refunds of one merchant and 2 of
another: the busy merchant's refunds go through two at a time, the other's are
not held back. (tests/runtime/test_key_limit_processes.py runs two real worker
processes against one file.)
"""

# expect: most in flight at once: m-busy=2, m-quiet=2
# expect: refunds succeeded: 8 of 8, none failed
# expect: waited for a slot (not failed): True

from __future__ import annotations

import threading
from collections import Counter

from pydantic import BaseModel

from agentq import Policy, Runtime, ToolContext, tool

LOCK = threading.Condition()
NOW: Counter[str] = Counter()
MOST: Counter[str] = Counter()


class Refund(BaseModel):
    merchant_id: str
    amount: int


@tool(queue="refunds")
def refund(ctx: ToolContext, args: Refund) -> None:
    """A refund that takes a moment at the payments API."""
    with LOCK:
        NOW[args.merchant_id] += 1
        MOST[args.merchant_id] = max(MOST[args.merchant_id], NOW[args.merchant_id])
        LOCK.notify_all()
        # Stay in flight until a second refund of this merchant is (or 2 s pass),
        # so the figure printed shows the limit reached, not scheduling luck.
        LOCK.wait_for(lambda: NOW[args.merchant_id] >= 2, timeout=2)
    with LOCK:
        NOW[args.merchant_id] -= 1


POLICY = Policy.model_validate(
    {"tools": {"refund": {"concurrency_key": "merchant_id", "max_in_flight": 2}}}
)


def main() -> None:
    rt = Runtime("sqlite:///:memory:", tools=[refund], policies=POLICY)
    ids = [rt.enqueue_action("refund", {"merchant_id": "m-busy", "amount": n}).task_id
           for n in range(6)]  # fmt: skip
    ids += [rt.enqueue_action("refund", {"merchant_id": "m-quiet", "amount": n}).task_id
            for n in range(2)]  # fmt: skip
    worker = rt.worker(concurrency=8)
    worker.drain()
    print(f"most in flight at once: m-busy={MOST['m-busy']}, m-quiet={MOST['m-quiet']}")
    infos = [rt.task(i) for i in ids]
    done = sum(1 for t in infos if t.status == "succeeded")
    failed = sum(t.failures for t in infos)
    print(f"refunds succeeded: {done} of {len(ids)}, none failed" if failed == 0 else
          f"refunds succeeded: {done} of {len(ids)}, {failed} failure(s)")  # fmt: skip
    print("waited for a slot (not failed):", worker.stats["key_limited"] > 0)
    rt.close()


if __name__ == "__main__":
    main()
