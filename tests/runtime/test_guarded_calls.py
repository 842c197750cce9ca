"""Guarded calls (issue 13, items 4 and 16): a non-idempotent call is never made
twice by itself. A redelivery after a crash runs the tool's reconcile handler
instead, or parks the task as outcome_unknown for an operator; an at-most-once
tool's delivery is held off for its timeout plus a margin before the handler runs.
Crashes here are injected (WorkerCrash); tests/chaos/test_guarded_kill.py kills
real worker processes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from agentq import (
    ConfigError,
    FakeClock,
    IllegalTransition,
    InvalidArguments,
    OutcomeUnknown,
    Runtime,
    TaskStatus,
    ToolContext,
    WorkerCrash,
    tool,
)
from agentq.backends import LEASE_SECONDS
from agentq.executor.guarded import horizon, may_have_applied
from agentq.lifecycle.audit import entries
from agentq.naive_payments import NaivePaymentsAPI
from agentq.policies import Policy, ToolPolicy
from tests.runtime.conftest import REDELIVERED_WITHIN

LOOPBACK = ToolPolicy(allowed_hosts=("127.0.0.1",))
POLICY = Policy(
    tools={"charge_bare": LOOPBACK, "charge_reconciled": LOOPBACK, "long_once": LOOPBACK}
)


class Charge(BaseModel):
    amount: int
    how: str = "ok"


class Charged(BaseModel):
    charge_id: str


def _post(ctx: ToolContext, args: Charge) -> Charged:
    if args.how == "unknown":
        raise OutcomeUnknown("the answer was lost")
    if args.how == "read_timeout":
        raise httpx.ReadTimeout("read timed out")
    if args.how == "refused" and ctx.attempt == 1:
        raise httpx.ConnectError("connection refused")
    client = ctx.http
    answer = client.post(
        f"{ctx.settings['payments_url']}/charges",
        json={"reference": ctx.task_id, "amount": args.amount},
    )
    return Charged(charge_id=answer.json()["charge_id"])


def _lookup(ctx: ToolContext, args: Charge) -> Charged | None:
    LOOKUPS.append(ctx.task_id)
    client = ctx.http
    found = client.get(
        f"{ctx.settings['payments_url']}/charges", params={"reference": ctx.task_id}
    ).json()["charges"]
    return Charged(charge_id=found[0]["charge_id"]) if found else None


LOOKUPS: list[str] = []


@tool(queue="pay", idempotent=False)
def charge_bare(ctx: ToolContext, args: Charge) -> Charged:
    return _post(ctx, args)


@tool(queue="pay", idempotent=False, reconcile=_lookup)
def charge_reconciled(ctx: ToolContext, args: Charge) -> Charged:
    return _post(ctx, args)


STARTED = threading.Event()
RELEASE = threading.Event()


@tool(queue="long", at_most_once=True, timeout=600)
def long_once(ctx: ToolContext, args: Charge) -> Charged:
    result = _post(ctx, args)
    if args.how == "block":
        STARTED.set()
        assert RELEASE.wait(30)
    return result


@pytest.fixture
def api() -> Iterator[NaivePaymentsAPI]:
    with NaivePaymentsAPI() as server:
        yield server


@pytest.fixture
def rt(backend_url: str, clock: FakeClock, api: NaivePaymentsAPI) -> Iterator[Runtime]:
    LOOKUPS.clear()
    STARTED.clear()
    RELEASE.clear()
    runtime = Runtime(
        backend_url, tools=[charge_bare, charge_reconciled, long_once], clock=clock,
        policies=POLICY, settings={"payments_url": api.url},
    )  # fmt: skip
    yield runtime
    runtime.close()


def _crash_after_the_call(rt: Runtime) -> None:
    rt.faults.arm("after_external_call", WorkerCrash())
    worker = rt.worker(receive_timeout=0.05)
    worker.drain()
    assert worker.stats["crashed"] == 1


def _redeliver(rt: Runtime, clock: FakeClock) -> None:
    clock.advance(LEASE_SECONDS + REDELIVERED_WITHIN)  # lease expiry + backoff
    rt.worker(receive_timeout=0.05).drain()


def test_without_reconcile_a_crashed_call_is_parked_and_never_made_again(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task = rt.enqueue_action("charge_bare", {"amount": 5})
    _crash_after_the_call(rt)
    assert rt.task(task.task_id).status is TaskStatus.RUNNING
    _redeliver(rt, clock)
    parked = rt.task(task.task_id)
    assert parked.status is TaskStatus.OUTCOME_UNKNOWN
    assert parked.error is not None and "no reconcile handler" in parked.error
    assert len(api.charges_for(task.task_id)) == 1  # charged once, not again
    assert rt.backend.stats("pay").depth == 0  # parked: no message at all
    counts = {c.tool: c for c in rt.tool_counts()}["charge_bare"]
    assert (counts.outcome_unknown, counts.running) == (1, 0)  # operators see it parked
    clock.advance(7200)
    rt.worker(receive_timeout=0.05).drain()
    assert len(api.charges_for(task.task_id)) == 1
    assert rt.task(task.task_id).status is TaskStatus.OUTCOME_UNKNOWN


def test_reconcile_finds_the_charge_instead_of_charging_again(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task = rt.enqueue_action("charge_reconciled", {"amount": 7})
    _crash_after_the_call(rt)
    _redeliver(rt, clock)
    done = rt.task(task.task_id)
    assert done.status is TaskStatus.SUCCEEDED
    assert [task.task_id] == LOOKUPS
    [charge] = api.charges_for(task.task_id)
    assert done.result == {"charge_id": charge["charge_id"]}


def test_reconcile_that_finds_nothing_lets_the_handler_run(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task = rt.enqueue_action("charge_reconciled", {"amount": 9})
    rt.faults.arm("after_lease", WorkerCrash())  # claimed (call started), never called
    rt.worker(receive_timeout=0.05).drain()
    assert api.charges_for(task.task_id) == []
    _redeliver(rt, clock)
    assert [task.task_id] == LOOKUPS
    assert len(api.charges_for(task.task_id)) == 1
    assert rt.task(task.task_id).status is TaskStatus.SUCCEEDED


def test_a_first_run_never_reconciles(rt: Runtime, api: NaivePaymentsAPI) -> None:
    task = rt.enqueue_action("charge_reconciled", {"amount": 1})
    rt.worker(receive_timeout=0.05).drain()
    assert LOOKUPS == [] and len(api.charges_for(task.task_id)) == 1
    assert rt.task(task.task_id).status is TaskStatus.SUCCEEDED


@pytest.mark.parametrize("how", ["unknown", "read_timeout"])
def test_an_answer_lost_in_the_handler_parks_it(rt: Runtime, how: str) -> None:
    task = rt.enqueue_action("charge_bare", {"amount": 5, "how": how})
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task.task_id).status is TaskStatus.OUTCOME_UNKNOWN


def test_a_request_that_was_never_sent_is_retried_as_usual(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task = rt.enqueue_action("charge_bare", {"amount": 5, "how": "refused"})
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task.task_id).status is TaskStatus.RETRY_SCHEDULED
    clock.advance(3600)
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task.task_id).status is TaskStatus.SUCCEEDED
    assert len(api.charges_for(task.task_id)) == 1


def test_which_failures_may_have_applied() -> None:
    assert may_have_applied(TimeoutError("gave up"))
    assert may_have_applied(OutcomeUnknown("lost"))
    assert may_have_applied(httpx.ReadTimeout("slow"))
    assert may_have_applied(httpx.RemoteProtocolError("cut"))
    assert not may_have_applied(httpx.ConnectError("refused"))
    assert not may_have_applied(httpx.ConnectTimeout("no route"))
    assert not may_have_applied(ValueError("bad"))


# -- operator resolution ---------------------------------------------------------------


def _parked(rt: Runtime, clock: FakeClock) -> str:
    task = rt.enqueue_action("charge_bare", {"amount": 5})
    _crash_after_the_call(rt)
    _redeliver(rt, clock)
    assert rt.task(task.task_id).status is TaskStatus.OUTCOME_UNKNOWN
    return task.task_id


def test_an_operator_marks_it_succeeded_with_the_result_found(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task_id = _parked(rt, clock)
    waiter = rt.enqueue_action("charge_bare", {"amount": 1}, after=[task_id])
    with pytest.raises(InvalidArguments, match="does not fit"):
        rt.resolve(task_id, "succeeded", result={"nope": 1}, by="ops")
    [charge] = api.charges_for(task_id)
    done = rt.resolve(task_id, "succeeded", result={"charge_id": charge["charge_id"]}, by="ann")
    assert done.status is TaskStatus.SUCCEEDED and done.result == {"charge_id": charge["charge_id"]}
    assert rt.task(waiter.task_id).status is TaskStatus.QUEUED  # its waiter is released
    [entry] = entries(rt.backend, target=task_id)
    assert (entry.actor, entry.action, entry.note) == ("ann", "resolve", "succeeded")
    with pytest.raises(IllegalTransition, match="only an outcome_unknown task"):
        rt.resolve(task_id, "retry")


def test_an_operator_retries_it_as_a_new_attempt(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task_id = _parked(rt, clock)
    again = rt.resolve(task_id, "retry", by="ops", note="provider says no charge")
    assert again.status is TaskStatus.QUEUED and again.attempt == 2
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task_id).status is TaskStatus.SUCCEEDED
    assert len(api.charges_for(task_id)) == 2  # the operator chose to charge again


def test_an_operator_fails_it(rt: Runtime, clock: FakeClock) -> None:
    task_id = _parked(rt, clock)
    dead = rt.resolve(task_id, "failed", by="ops", note="refunded by hand")
    assert dead.status is TaskStatus.DEAD and "refunded by hand" in (dead.error or "")
    assert task_id in {e["entry_id"] for e in rt.dead_letters()}
    with pytest.raises(InvalidArguments, match="unknown resolution"):
        rt.resolve(task_id, "maybe")


# -- at most once -----------------------------------------------------------------------


def test_at_most_once_holds_its_delivery_off_while_the_handler_runs(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task = rt.enqueue_action("long_once", {"amount": 3, "how": "block"})
    worker = rt.worker(receive_timeout=0.05)
    t = threading.Thread(target=worker.drain)
    t.start()
    try:
        assert STARTED.wait(30)
        stats = rt.backend.stats("long")
        assert (stats.depth, stats.scheduled) == (1, 1)  # acked, re-sent for later
    finally:
        RELEASE.set()
        t.join(30)
    assert rt.task(task.task_id).status is TaskStatus.SUCCEEDED
    assert rt.backend.stats("long").depth == 0  # the completion acked the re-sent message
    assert worker.stats.get("renewed", 0) == 0


def test_at_most_once_never_repeats_before_its_horizon_then_parks(
    rt: Runtime, clock: FakeClock, api: NaivePaymentsAPI
) -> None:
    task = rt.enqueue_action("long_once", {"amount": 3})
    _crash_after_the_call(rt)
    clock.advance(horizon(600).total_seconds() - 5)  # long past any lease
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task.task_id).status is TaskStatus.RUNNING
    assert len(api.charges_for(task.task_id)) == 1
    clock.advance(10)
    rt.worker(receive_timeout=0.05).drain()
    assert rt.task(task.task_id).status is TaskStatus.OUTCOME_UNKNOWN
    assert len(api.charges_for(task.task_id)) == 1


def test_at_most_once_needs_a_timeout() -> None:
    with pytest.raises(ConfigError, match="at_most_once needs timeout"):

        @tool(at_most_once=True)
        def no_timeout(ctx: ToolContext, args: Charge) -> Any: ...

    with pytest.raises(ConfigError, match="reconcile must be a function"):

        @tool(reconcile=lambda ctx: None)
        def bad_reconcile(ctx: ToolContext, args: Charge) -> Any: ...


# -- with a per-key concurrency limit ---------------------------------------------------


class MerchantCharge(BaseModel):
    merchant_id: str
    amount: int


@tool(queue="limited", idempotent=False)
def limited_charge(ctx: ToolContext, args: MerchantCharge) -> dict[str, int]:
    if args.amount < 0:
        raise OutcomeUnknown("the answer was lost")
    return {"charged": args.amount}


def test_a_guarded_claim_takes_its_key_slot_and_a_parked_task_frees_it(
    tmp_path: Any, clock: FakeClock
) -> None:
    policy = Policy.model_validate(
        {"tools": {"limited_charge": {"concurrency_key": "merchant_id", "max_in_flight": 1}}}
    )
    rt = Runtime(f"sqlite:///{tmp_path / 'k.db'}", tools=[limited_charge], policies=policy,
                 clock=clock)  # fmt: skip
    try:
        lost = rt.enqueue_action("limited_charge", {"merchant_id": "m", "amount": -1})
        later = rt.enqueue_action("limited_charge", {"merchant_id": "m", "amount": 2})
        worker = rt.worker(receive_timeout=0.05, concurrency=4)
        worker.drain()
        assert worker.stats.get("key_limited", 0) >= 1  # the second waited for the slot
        assert rt.task(lost.task_id).status is TaskStatus.OUTCOME_UNKNOWN
        assert rt.task(later.task_id).status is TaskStatus.SUCCEEDED  # the slot was freed
    finally:
        rt.close()
