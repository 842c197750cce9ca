"""A payments API that ignores Idempotency-Key: reconcile, or park for an operator.

The provider (a loopback HTTP server) charges on every ``POST /charges``: calling
it again after a crash would charge twice. Both tools below are declared
``idempotent=False``, so the runtime records that a call starts, durably, before
the handler runs. The worker dies right after the charge (a crash injected after
the call). On the redelivery:

* ``charge`` has a ``reconcile`` handler: it runs instead of the handler, finds the
  charge by its reference (the task id) and records it: one charge;
* ``charge_unreconciled`` has none: the task is parked as ``outcome_unknown`` (no
  message, nothing runs it) until an operator resolves it: still one charge.
"""

# expect: with reconcile: succeeded, charges at the provider: 1, looked up: yes
# expect: without reconcile: outcome_unknown, charges at the provider: 1
# expect: resolved by the operator: succeeded, charges at the provider: 1

from __future__ import annotations

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, WorkerCrash, tool
from agentq.naive_payments import NaivePaymentsAPI
from agentq.policies import Policy, ToolPolicy

LOOKED_UP: list[str] = []


class Payment(BaseModel):
    amount_cents: int


class Charged(BaseModel):
    charge_id: str


def find_charge(ctx: ToolContext, args: Payment) -> Charged | None:
    """Ask the provider whether a charge with this task's reference exists."""
    LOOKED_UP.append(ctx.task_id)
    client = ctx.http
    url = f"{ctx.settings['payments_url']}/charges"
    found = client.get(url, params={"reference": ctx.task_id}).json()["charges"]
    return Charged(charge_id=found[0]["charge_id"]) if found else None


def _charge(ctx: ToolContext, args: Payment) -> Charged:
    client = ctx.http
    answer = client.post(
        f"{ctx.settings['payments_url']}/charges",
        json={"reference": ctx.task_id, "amount": args.amount_cents},
    )
    return Charged(charge_id=answer.json()["charge_id"])


@tool(queue="payments", idempotent=False, reconcile=find_charge)
def charge(ctx: ToolContext, args: Payment) -> Charged:
    return _charge(ctx, args)


@tool(queue="payments", idempotent=False)
def charge_unreconciled(ctx: ToolContext, args: Payment) -> Charged:
    return _charge(ctx, args)


def crash_after_the_call_then_redeliver(rt: Runtime, clock: FakeClock) -> None:
    rt.faults.arm("after_external_call", WorkerCrash())
    rt.worker().drain()  # charged, then the worker "died": nothing committed
    clock.advance(30)  # its lease expires; the message is delivered again
    rt.worker().drain()


def main() -> None:
    clock = FakeClock()
    with NaivePaymentsAPI() as api:
        loopback = ToolPolicy(allowed_hosts=("127.0.0.1",))
        policy = Policy(tools={"charge": loopback, "charge_unreconciled": loopback})
        rt = Runtime("sqlite:///:memory:", tools=[charge, charge_unreconciled], clock=clock,
                     policies=policy, settings={"payments_url": api.url})  # fmt: skip
        one = rt.enqueue_action("charge", {"amount_cents": 1250})
        crash_after_the_call_then_redeliver(rt, clock)
        print(f"with reconcile: {rt.task(one.task_id).status}, charges at the provider: "
              f"{len(api.charges_for(one.task_id))}, looked up: "
              f"{'yes' if [one.task_id] == LOOKED_UP else 'no'}")  # fmt: skip

        two = rt.enqueue_action("charge_unreconciled", {"amount_cents": 990})
        crash_after_the_call_then_redeliver(rt, clock)
        print(f"without reconcile: {rt.task(two.task_id).status}, charges at the provider: "
              f"{len(api.charges_for(two.task_id))}")  # fmt: skip

        [found] = api.charges_for(two.task_id)  # the operator looks it up by hand
        rt.resolve(two.task_id, "succeeded", result={"charge_id": found["charge_id"]},
                   by="ops", note="charge found in the provider's dashboard")  # fmt: skip
        print(f"resolved by the operator: {rt.task(two.task_id).status}, charges at the "
              f"provider: {len(api.charges_for(two.task_id))}")  # fmt: skip
        rt.close()


if __name__ == "__main__":
    main()
