"""The refund bot's flows on SQLite with the fake clock and real HTTP on loopback."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from agentq import (
    ApprovalError,
    ApprovalStatus,
    Decision,
    FakeClock,
    IdempotencyConflict,
    InvalidArguments,
    Runtime,
    TaskStatus,
    UnknownTool,
    WorkerCrash,
)
from agentq.backends import LEASE_SECONDS
from agentq.demo_server import DemoAPI
from agentq.envelope import envelope_of
from agentq.ledger import Tables
from tests.runtime.conftest import REDELIVERED_WITHIN, queue_table


def refund(rt: Runtime, amount: float, order: str = "o1", **kw: Any) -> Any:
    return rt.enqueue_action("execute_refund", {"order_id": order, "amount": amount}, **kw)


def setup_orders(rt: Runtime) -> None:
    rt.transact(
        lambda tx: tx.execute(
            "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, state TEXT, refund_id TEXT)"
        )
    )


def order_rows(rt: Runtime) -> list[tuple[Any, ...]]:
    return rt.transact(lambda tx: tx.execute("SELECT id, state FROM orders ORDER BY id"))


# -- decisions ------------------------------------------------------------------------


def test_decision_commits_state_and_task_together(rt: Runtime, api: DemoAPI) -> None:
    setup_orders(rt)

    def decide(tx: Decision) -> str:
        tx.execute("INSERT INTO orders VALUES ('o1', 'refund_decided', NULL)")
        return tx.enqueue("execute_refund", {"order_id": "o1", "amount": 25}).task_id

    task_id = rt.transact(decide)
    assert rt.task(task_id).status == TaskStatus.QUEUED
    returned = refund(rt, 7, idempotency_key="k")
    assert returned == rt.task(returned.task_id)  # the handle equals the ledger's view
    rt.worker().drain()
    task = rt.task(task_id)
    assert task.status == TaskStatus.SUCCEEDED
    assert task.result["amount"] == 25
    assert {b["idempotency_key"] for b in api.applied()} == {task_id, returned.task_id}


def test_rollback_leaves_neither_state_nor_task(rt: Runtime, api: DemoAPI) -> None:
    setup_orders(rt)

    def decide(tx: Decision) -> None:
        tx.execute("INSERT INTO orders VALUES ('o1', 'refund_decided', NULL)")
        tx.enqueue("execute_refund", {"order_id": "o1", "amount": 25})
        raise RuntimeError("the agent crashed before committing")

    with pytest.raises(RuntimeError):
        rt.transact(decide)
    assert order_rows(rt) == []
    assert rt.tasks() == []
    assert rt.worker().drain() == 0
    assert api.requests() == 0


def test_invalid_arguments_name_the_field_and_commit_nothing(rt: Runtime) -> None:
    setup_orders(rt)

    def decide(tx: Decision) -> None:
        tx.execute("INSERT INTO orders VALUES ('o1', 'x', NULL)")
        tx.enqueue("execute_refund", {"order_id": "o1", "amount": -5, "currency": "dollars"})

    with pytest.raises(InvalidArguments, match=r"amount: .*greater than 0.*currency"):
        rt.transact(decide)
    assert order_rows(rt) == []
    with pytest.raises(InvalidArguments, match="order_id"):
        rt.enqueue_action("execute_refund", {"amount": 5})
    with pytest.raises(InvalidArguments, match="object of arguments"):
        rt.enqueue_action("execute_refund", ["o1", 5])
    with pytest.raises(UnknownTool, match=r"wire_money.*you may enqueue: .*execute_refund"):
        rt.enqueue_action("wire_money", {})


def test_enqueue_action_is_idempotent(rt: Runtime, api: DemoAPI) -> None:
    first = refund(rt, 10, idempotency_key="agent-call-1")
    again = refund(rt, 10, idempotency_key="agent-call-1")
    assert again.task_id == first.task_id
    assert len(rt.tasks()) == 1
    rt.worker().drain()
    third = refund(rt, 10, idempotency_key="agent-call-1")
    assert third.task_id == first.task_id and third.status == TaskStatus.SUCCEEDED
    assert len(api.applied()) == 1
    with pytest.raises(IdempotencyConflict, match=f"belongs to task '{first.task_id}'"):
        rt.enqueue_action(
            "request_shipping",
            {"order_id": "o1", "address": "1 Main St", "items": ["a"]},
            idempotency_key="agent-call-1",
        )


def test_tool_schemas_are_openai_function_schemas(rt: Runtime) -> None:
    schemas = {s["function"]["name"]: s for s in rt.tool_schemas()}
    refund_schema = schemas["execute_refund"]
    assert refund_schema["type"] == "function"
    params = refund_schema["function"]["parameters"]
    assert params["type"] == "object"
    assert set(params["required"]) == {"order_id", "amount"}
    assert params["properties"]["amount"]["exclusiveMinimum"] == 0
    assert "Large refunds need" in refund_schema["function"]["description"]


def test_on_commit_state_write_commits_with_the_result(
    tmp_path: Any, clock: FakeClock, api: DemoAPI
) -> None:
    from tests.runtime.conftest import ROOT, settings_for

    rt = Runtime(
        f"sqlite:///{tmp_path / 'o.db'}", tools=ROOT / "tools", policies=ROOT / "policies",
        clock=clock, settings=settings_for(api) | {"orders_table": "orders"},
    )  # fmt: skip
    setup_orders(rt)
    rt.transact(
        lambda tx: (
            tx.execute("INSERT INTO orders VALUES ('o1', 'refund_decided', NULL)"),
            tx.enqueue("execute_refund", {"order_id": "o1", "amount": 20}),
        )
    )
    rt.worker().drain()
    assert order_rows(rt) == [("o1", "refunded")]
    rt.close()


# -- crashes, leases, stale workers -------------------------------------------------------


def test_killed_worker_task_is_redelivered_and_charged_once(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    task = refund(rt, 40)
    # The worker dies after the payments API answered, before the completion commit.
    rt.faults.arm("after_external_call", WorkerCrash())
    worker = rt.worker()
    worker.drain()
    assert worker.stats["crashed"] == 1
    assert rt.task(task.task_id).status == TaskStatus.RUNNING
    assert len(api.applied()) == 1
    clock.advance(LEASE_SECONDS + REDELIVERED_WITHIN)  # lease expiry + backoff
    rt.worker().drain()
    done = rt.task(task.task_id)
    assert done.status == TaskStatus.SUCCEEDED
    assert done.deliveries == 2
    # The second delivery called the API again with the same key: it was not charged twice.
    assert api.requests() == 2
    assert api.replays() == 1
    assert api.charges_per_key() == {task.task_id: 1}
    assert (
        done.result["refund_id"] == api.state.responses[("/refunds", task.task_id)][1]["refund_id"]
    )


def test_stale_worker_completion_fails_and_records_nothing(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    task = refund(rt, 40)
    release = threading.Event()
    entered = threading.Event()
    stale_worker = rt.worker(concurrency=1, prefetch=0)  # busy with the task, it takes no other

    def slow_then_crash_window(info: dict[str, object]) -> bool:
        entered.set()
        release.wait(10)
        return False  # never raise; just hold the stale worker here

    rt.faults.arm("after_external_call", WorkerCrash(), when=slow_then_crash_window)
    stale_worker.renew_margin = -1  # this worker never renews: its lease will lapse
    t = threading.Thread(target=stale_worker.drain)
    t.start()
    assert entered.wait(10)
    # Its lease expires; another worker gets the task and completes it.
    clock.advance(LEASE_SECONDS + REDELIVERED_WITHIN)
    rt.faults.disarm("after_external_call")
    fresh = rt.worker()
    fresh.drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    winner = rt.task(task.task_id).result
    release.set()
    t.join(10)
    assert stale_worker.stats["stale_completion"] == 1
    assert stale_worker.stats["succeeded"] == 0
    assert rt.task(task.task_id).result == winner  # the stale result was not recorded
    assert api.charges_per_key() == {task.task_id: 1}


def test_lease_renewal_keeps_a_long_task_from_redelivery(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    task = refund(rt, 40)
    release = threading.Event()
    entered = threading.Event()

    def hold(info: dict[str, object]) -> bool:
        entered.set()
        release.wait(20)
        return False

    rt.faults.arm("after_external_call", WorkerCrash(), when=hold)
    worker = rt.worker(monitor_interval=1.0)
    t = threading.Thread(target=worker.drain)
    t.start()
    assert entered.wait(10)
    for _ in range(40):  # 40 s of fake time, four lease lengths
        clock.wait_for_sleepers(1)  # the monitor is idle again
        clock.advance(1)
        assert rt.backend.stats("payments").ready == 0
    other = rt.worker()
    assert other.drain() == 0
    release.set()
    t.join(10)
    assert worker.stats["renewed"] >= 4
    assert worker.stats["succeeded"] == 1
    assert rt.task(task.task_id).deliveries == 1


def test_poison_task_that_kills_every_worker_ends_in_the_dead_letter_queue(
    rt: Runtime, clock: FakeClock
) -> None:
    task = refund(rt, 40)
    rt.faults.arm("after_lease", WorkerCrash(), times=100)
    for _ in range(10):
        rt.worker().drain()
        clock.advance(3600 * 2)
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.DEAD
    assert "delivered 5 times" in (info.error or "")
    assert [d["task_id"] for d in rt.dead_letters()] == [task.task_id]


# -- failures, retries, dead letters -----------------------------------------------------------


def test_retry_after_is_honoured_and_holds_back_the_tool(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    api.fail_next("/refunds", 429, retry_after=30)
    first = refund(rt, 10, order="a")
    worker = rt.worker(concurrency=1)
    worker.drain()
    info = rt.task(first.task_id)
    assert info.status == TaskStatus.RETRY_SCHEDULED
    assert info.next_attempt_at == clock.now() + timedelta(seconds=30)
    assert info.failures == 0  # throttling does not use up attempts
    second = refund(rt, 10, order="b")
    rt.worker().drain()
    assert rt.task(second.task_id).status != TaskStatus.SUCCEEDED  # held back with the tool
    assert api.requests() == 1
    clock.advance(29)
    rt.worker().drain()
    assert api.requests() == 1
    clock.advance(1)
    rt.worker().drain()
    assert rt.task(first.task_id).status == TaskStatus.SUCCEEDED
    assert rt.task(second.task_id).status == TaskStatus.SUCCEEDED
    assert api.charges_per_key() == {first.task_id: 1, second.task_id: 1}


def test_transient_errors_retry_with_backoff_then_dead_letter(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    for _ in range(20):
        api.fail_next("/refunds", 500)
    task = refund(rt, 10)
    attempts = []
    for _ in range(8):
        rt.worker().drain()
        info = rt.task(task.task_id)
        attempts.append((info.status, info.failures))
        if info.status == TaskStatus.DEAD:
            break
        assert info.status == TaskStatus.RETRY_SCHEDULED
        assert info.next_attempt_at is not None and info.next_attempt_at > clock.now()
        clock.set(info.next_attempt_at)
    assert attempts[-1] == (TaskStatus.DEAD, 6)  # the tool declares max_attempts=6
    info = rt.task(task.task_id)
    assert "failed 6 time(s)" in (info.error or "") and "500" in (info.error or "")
    [dead] = rt.dead_letters()
    assert dead["task_id"] == task.task_id and dead["tool"] == "execute_refund"
    # Replay from the dead-letter queue once the API has recovered.
    api.state.faults.clear()
    replayed = rt.replay(task.task_id)
    assert replayed.status == TaskStatus.QUEUED
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert rt.dead_letters() == []


def test_corrupt_envelope_goes_to_the_dead_letter_queue(rt: Runtime) -> None:
    rt.backend.transact(lambda tx: tx.send("payments", ("tsk_bogus", 1), {"tool": 42}))
    good = refund(rt, 10)
    worker = rt.worker()
    worker.drain()
    assert rt.task(good.task_id).status == TaskStatus.SUCCEEDED
    [dead] = rt.dead_letters()
    assert dead["claimed_task_id"] == "tsk_bogus" and dead["stray"]
    assert "corrupt envelope" in dead["error"]
    assert rt.backend.stats("payments").depth == 0  # not redelivered forever


def test_payload_that_is_not_json_goes_to_the_dead_letter_queue(rt: Runtime) -> None:
    # Written around agentq (a manual fix gone wrong): the lease must not fail forever.
    rt.transact(lambda tx: tx.execute(
        f"INSERT INTO {queue_table(rt, 'payments')} (task_id, attempt, payload, deliver_time, "
        "agentq_visible_at, agentq_lease_seq) VALUES ('tsk_raw', 1, ?, 0, 0, 7)", (b"{not json",)
    ))  # fmt: skip
    good = refund(rt, 10)
    rt.worker().drain()
    assert rt.task(good.task_id).status == TaskStatus.SUCCEEDED
    [dead] = rt.dead_letters()
    assert dead["claimed_task_id"] == "tsk_raw" and dead["payload"] == "{not json"
    assert dead["stray"] and dead["entry_id"].startswith("stray_") and dead["task_id"] is None
    assert "corrupt envelope" in dead["error"]
    assert rt.backend.stats("payments").depth == 0


# -- policy enforcement ----------------------------------------------------------------------


def test_large_refund_waits_for_approval(rt: Runtime, api: DemoAPI) -> None:
    task = refund(rt, 500)
    assert task.status == TaskStatus.AWAITING_APPROVAL
    rt.worker().drain()
    assert api.applied() == []
    assert api.requests("/notifications") == 1  # approvers were asked
    assert rt.approval(task.approval_id or "").status == ApprovalStatus.PENDING


def test_executor_refuses_a_forged_large_refund_without_approval(rt: Runtime, api: DemoAPI) -> None:
    """An agent (or anyone with queue access) sending the message directly
    cannot skip the approval: the executor checks the policy itself."""
    small = refund(rt, 10)

    def forge(tx: Decision) -> None:
        # Tamper with the ledger and message as a bypass attempt would.
        rec = tx.tx.get_record(Tables.TASKS, small.task_id)
        assert rec is not None
        tx.tx.ack("payments", (small.task_id, 1))
        rec["args"] = {**rec["args"], "amount": 5000.0}
        tx.tx.put_record(Tables.TASKS, small.task_id, rec)
        tx.tx.send("payments", (small.task_id, 1), envelope_of(rec).model_dump(mode="json"))

    rt.transact(forge)
    worker = rt.worker()
    worker.drain()
    assert worker.stats["policy_refused"] == 1
    info = rt.task(small.task_id)
    assert info.status == TaskStatus.DEAD and "needs an approved approval" in (info.error or "")
    assert api.applied() == []


def test_disallowed_host_is_refused(tmp_path: Any, clock: FakeClock, api: DemoAPI) -> None:
    from tests.runtime.conftest import ROOT

    rt = Runtime(
        f"sqlite:///{tmp_path / 'h.db'}", tools=ROOT / "tools", policies=ROOT / "policies",
        clock=clock, settings={"payments_url": "http://payments.attacker.example"},
    )  # fmt: skip
    task = refund(rt, 10)
    rt.worker().drain()
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.DEAD
    assert "may not call host 'payments.attacker.example'" in (info.error or "")
    rt.close()


# -- approvals and escalations ------------------------------------------------------------------


def test_approval_cancels_the_escalation_in_the_same_transaction(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    task = refund(rt, 500)
    approval = rt.approval(task.approval_id or "")
    assert approval.escalate_at == clock.now() + timedelta(hours=72)
    escalation_id = approval.escalation_task_id or ""
    clock.advance(timedelta(hours=10))
    done = rt.approve(approval.approval_id, by="alice", note="verified receipt")
    assert done.status == TaskStatus.QUEUED
    assert rt.task(escalation_id).status == TaskStatus.CANCELLED
    rt.worker().drain()
    clock.advance(timedelta(hours=80))
    rt.worker().drain()
    assert api.requests("/escalations") == 0
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert rt.approval(approval.approval_id).status == ApprovalStatus.APPROVED
    with pytest.raises(ApprovalError, match=r"was already approved \(by alice"):
        rt.approve(approval.approval_id, by="bob")


def test_escalation_fires_and_a_late_approval_still_works(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    task = refund(rt, 500)
    rt.worker().drain()
    clock.advance(timedelta(hours=72) - timedelta(seconds=1))
    rt.worker().drain()
    assert api.requests("/escalations") == 0
    clock.advance(1)
    rt.worker().drain()
    assert api.requests("/escalations") == 1
    approval = rt.approval(task.approval_id or "")
    assert approval.status == ApprovalStatus.ESCALATED
    assert approval.escalated_at == clock.now()
    rt.approve(approval.approval_id, by="manager")
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert rt.approval(approval.approval_id).escalated_at is not None


def test_reject_cancels_action_and_escalation(rt: Runtime, api: DemoAPI, clock: FakeClock) -> None:
    task = refund(rt, 500)
    rt.reject(task.approval_id or "", by="alice", note="fraud")
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.CANCELLED and "rejected by alice: fraud" in (info.error or "")
    clock.advance(timedelta(days=4))
    rt.worker().drain()
    assert api.applied() == [] and api.requests("/escalations") == 0


def test_approval_racing_a_running_escalation_leaves_one_outcome(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    task = refund(rt, 500)
    rt.worker().drain()
    clock.advance(timedelta(hours=72))
    entered = threading.Event()
    release = threading.Event()

    def hold_escalation(info: dict[str, object]) -> bool:
        if info.get("tool") != "escalate":
            return False
        entered.set()
        release.wait(10)
        return False

    rt.faults.arm("after_external_call", WorkerCrash(), when=hold_escalation, times=5)
    worker = rt.worker()
    t = threading.Thread(target=worker.drain)
    t.start()
    assert entered.wait(10)
    # The escalation handler has run (notification sent) but not committed yet.
    rt.approve(task.approval_id or "", by="alice")
    release.set()
    t.join(10)
    approval = rt.approval(task.approval_id or "")
    assert approval.status == ApprovalStatus.APPROVED
    assert approval.escalated_at is None  # the escalation's completion was refused
    assert worker.stats["stale_completion"] == 1
    assert rt.task(approval.escalation_task_id or "").status == TaskStatus.CANCELLED
    rt.faults.disarm("after_external_call")
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
