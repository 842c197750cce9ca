"""Retention (issue 14): finished tasks, their approvals, idempotency keys and
audit entries are deleted once older than their retention; unfinished tasks never
are. Time moves on the injected fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    ConfigError,
    FakeClock,
    PermanentError,
    Runtime,
    TaskNotFound,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.errors import ApprovalNotFound
from agentq.ledger import Tables
from agentq.lifecycle.retention import FINAL, FINAL_APPROVALS
from agentq.policies import ApprovalRule, Policy, ToolPolicy
from agentq.retention import DEFAULT_AUDIT_RETENTION
from tests.runtime._drive import stop_on_the_fake_clock

DAY = timedelta(days=1)


class Args(BaseModel):
    ref: str
    amount: float = 1


@tool(queue="work")
def pay(ctx: ToolContext, args: Args) -> dict[str, Any]:
    return {"paid": args.amount}


@tool(queue="work")
def note(ctx: ToolContext, args: Args) -> dict[str, Any]:
    return {}


@tool(queue="work", max_attempts=1)
def doomed(ctx: ToolContext, args: Args) -> dict[str, Any]:
    raise PermanentError("told to fail")


@tool(queue="work", max_attempts=5)
def shaky(ctx: ToolContext, args: Args) -> dict[str, Any]:
    raise RuntimeError("not yet")


TOOLS = [pay, note, doomed, shaky]
POLICY = Policy(approvals=(ApprovalRule(tool="pay", field="amount", above=100),))


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(backend_url, tools=TOOLS, policies=POLICY, clock=clock)
    yield runtime
    runtime.close()


def exists(rt: Runtime, task_id: str) -> bool:
    try:
        rt.task(task_id)
    except TaskNotFound:
        return False
    return True


def test_the_prunable_states_are_read_off_the_transition_table() -> None:
    # dead can be replayed: it is not final, and goes only without its dead letter.
    assert {TaskStatus.SUCCEEDED, TaskStatus.CANCELLED} == FINAL
    assert {str(s) for s in FINAL_APPROVALS} == {
        "approved", "rejected", "auto_rejected", "void", "expired"
    }  # fmt: skip


def test_finished_tasks_older_than_the_retention_go_and_younger_ones_stay(
    rt: Runtime, clock: FakeClock
) -> None:
    old = rt.enqueue_action("note", {"ref": "old"})
    cancelled = rt.enqueue_action("note", {"ref": "cancelled"}, delay=3600)
    rt.cancel(cancelled.task_id)
    rt.worker().drain()
    clock.advance(3 * DAY)
    young = rt.enqueue_action("note", {"ref": "young"})
    rt.worker().drain()
    clock.advance(4 * DAY)  # the old ones finished exactly 7 days ago: not older yet
    assert rt.prune().counts.tasks == 0
    clock.advance(1)
    report = rt.prune()
    assert report.counts.tasks == 2
    assert not exists(rt, old.task_id) and not exists(rt, cancelled.task_id)
    assert rt.task(young.task_id).status == TaskStatus.SUCCEEDED
    assert rt.prune().counts.tasks == 0  # nothing left to delete: a second pass is a no-op
    clock.advance(3 * DAY)
    assert rt.prune().counts.tasks == 1 and not exists(rt, young.task_id)


def test_unfinished_tasks_are_never_deleted_whatever_their_age(
    rt: Runtime, clock: FakeClock
) -> None:
    waiting = rt.enqueue_action("pay", {"ref": "big", "amount": 500})
    far = rt.enqueue_action("note", {"ref": "far"}, at=clock.now() + 900 * DAY)
    retrying = rt.enqueue_action("shaky", {"ref": "s"})
    dead = rt.enqueue_action("doomed", {"ref": "d"})
    rt.worker().drain()
    queued = rt.enqueue_action("note", {"ref": "never run"})
    assert rt.task(retrying.task_id).status == TaskStatus.RETRY_SCHEDULED
    assert rt.task(dead.task_id).status == TaskStatus.DEAD
    clock.advance(400 * DAY)
    for report in (rt.prune(), rt.prune(older_than=timedelta(0))):
        assert report.counts.tasks == 0
    assert rt.task(waiting.task_id).status == TaskStatus.AWAITING_APPROVAL
    assert rt.approval(waiting.approval_id or "").status == "pending"
    assert rt.task(far.task_id).status == TaskStatus.QUEUED
    assert rt.task(queued.task_id).status == TaskStatus.QUEUED
    assert rt.task(retrying.task_id).status == TaskStatus.RETRY_SCHEDULED
    assert rt.task(dead.task_id).status == TaskStatus.DEAD  # its dead letter is unresolved
    # Once an operator deletes the dead letter, the dead task is finished for good.
    assert rt.delete_dead_letters([dead.task_id], by="ops") == [dead.task_id]
    report = rt.prune()
    assert report.counts.tasks == 1 and not exists(rt, dead.task_id)
    # The deletion's audit entry is young: it stays its own retention, then goes.
    assert report.counts.audit_entries == 0 and len(rt.audit_log()) == 1
    clock.advance(8 * DAY)  # past the tasks' retention, not the audit's (90 days)
    assert rt.prune().counts.audit_entries == 0 and len(rt.audit_log()) == 1
    clock.advance(DEFAULT_AUDIT_RETENTION)
    assert rt.prune().counts.audit_entries == 1 and rt.audit_log() == []


def test_a_dead_task_replayed_after_the_read_is_not_deleted(
    rt: Runtime, clock: FakeClock
) -> None:
    dead = rt.enqueue_action("doomed", {"ref": "d"})
    rt.worker().drain()
    rt.delete_dead_letters([dead.task_id])
    clock.advance(8 * DAY)
    # The pass reads a page, then deletes in a transaction: a replay in between wins.
    real = rt.backend.list_records

    def list_then_replay(table: str, *a: Any, **kw: Any) -> Any:
        page = real(table, *a, **kw)
        if table == Tables.TASKS and any(k == dead.task_id for k, _ in page):
            rt.backend.list_records = real  # type: ignore[method-assign]
            rt.replay(dead.task_id)
        return page

    rt.backend.list_records = list_then_replay  # type: ignore[method-assign]
    try:
        assert rt.prune().counts.tasks == 0
    finally:
        rt.backend.list_records = real  # type: ignore[method-assign]
    assert rt.task(dead.task_id).status == TaskStatus.QUEUED


def test_idempotency_dedupes_within_the_retention_and_a_later_resubmit_is_a_new_task(
    rt: Runtime, clock: FakeClock
) -> None:
    first = rt.submit("note", {"ref": "r"}, idempotency_key="call-1")
    rt.worker().drain()
    clock.advance(6 * DAY)
    rt.prune()
    again = rt.submit("note", {"ref": "r"}, idempotency_key="call-1")
    assert not again.created and again.task.task_id == first.task.task_id
    clock.advance(2 * DAY)
    report = rt.prune()
    assert (report.counts.tasks, report.counts.idempotency_keys) == (1, 1)
    later = rt.submit("note", {"ref": "r"}, idempotency_key="call-1")
    assert later.created and later.task.task_id != first.task.task_id
    assert rt.task(later.task.task_id).status == TaskStatus.QUEUED


def test_a_key_kept_by_an_unfinished_task_is_never_deleted(
    rt: Runtime, clock: FakeClock
) -> None:
    waiting = rt.submit("pay", {"ref": "big", "amount": 500}, idempotency_key="k")
    clock.advance(30 * DAY)
    assert rt.prune().counts.idempotency_keys == 0
    assert rt.submit("pay", {"ref": "big", "amount": 500}, idempotency_key="k").task.task_id == (
        waiting.task.task_id
    )


def test_an_approval_and_its_audit_entries_go_with_their_task(
    rt: Runtime, clock: FakeClock
) -> None:
    approved = rt.enqueue_action("pay", {"ref": "a", "amount": 500})
    rejected = rt.enqueue_action("pay", {"ref": "b", "amount": 500})
    pending = rt.enqueue_action("pay", {"ref": "c", "amount": 500})
    rt.approve(approved.approval_id or "", by="manager")
    rt.reject(rejected.approval_id or "", by="manager")
    rt.worker().drain()
    assert rt.task(approved.task_id).status == TaskStatus.SUCCEEDED
    assert len(rt.audit_log()) == 2
    clock.advance(8 * DAY)
    report = rt.prune()
    assert report.counts.approvals == 2
    for task in (approved, rejected):
        assert not exists(rt, task.task_id)
        with pytest.raises(ApprovalNotFound):
            rt.approval(task.approval_id or "")
    assert rt.approval(pending.approval_id or "").status == "pending"
    assert rt.task(pending.task_id).status == TaskStatus.AWAITING_APPROVAL
    # The audit entries outlive their tasks until their own retention (issue 27,
    # item 14): not even --older-than 0s deletes them before 90 days.
    assert report.counts.audit_entries == 0 and len(rt.audit_log()) == 2
    assert rt.prune(older_than=timedelta(0)).counts.audit_entries == 0
    assert len(rt.audit_log()) == 2
    clock.advance(DEFAULT_AUDIT_RETENTION - 8 * DAY + DAY)
    assert rt.prune().counts.audit_entries == 2 and rt.audit_log() == []


def test_a_tools_policy_retention_wins_over_the_runtimes(
    backend_url: str, clock: FakeClock
) -> None:
    policy = Policy(tools={"note": ToolPolicy(retention="1h"), "pay": ToolPolicy(retention="off")})
    with Runtime(backend_url, tools=TOOLS, policies=policy, clock=clock) as rt:
        short = rt.enqueue_action("note", {"ref": "n"})
        kept = rt.enqueue_action("pay", {"ref": "p"})
        default = rt.enqueue_action("doomed", {"ref": "d"})
        rt.worker().drain()
        rt.delete_dead_letters([default.task_id])
        clock.advance(2 * 3600)
        assert rt.prune().counts.tasks == 1 and not exists(rt, short.task_id)
        clock.advance(30 * DAY)
        assert rt.prune().counts.tasks == 1 and not exists(rt, default.task_id)
        assert exists(rt, kept.task_id)  # "off" for its tool
        # An explicit --older-than is for every tool, even one whose retention is off.
        assert rt.prune(older_than=DAY).counts.tasks == 1 and not exists(rt, kept.task_id)


@pytest.mark.parametrize("off", [None, "off", "never"])
def test_retention_off_keeps_every_finished_task(
    backend_url: str, clock: FakeClock, off: Any
) -> None:
    with Runtime(backend_url, tools=TOOLS, policies=POLICY, clock=clock, retention=off) as rt:
        assert rt.retention is None
        task = rt.enqueue_action("note", {"ref": "n"})
        rt.worker().drain()
        clock.advance(3650 * DAY)
        assert rt.prune().counts.total == 0 and exists(rt, task.task_id)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be more than 0: use 'off'"),
        ("0s", "must be more than 0"),
        ("soon", "invalid duration 'soon'"),
        (-5, "must not be negative"),
        (True, "invalid retention True"),
    ],
)
def test_a_bad_retention_is_a_config_error_naming_it(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Runtime("sqlite:///:memory:", tools=TOOLS, retention=value)


def test_retention_takes_durations_in_every_form(clock: FakeClock) -> None:
    for value in ("36h", 129600, 129600.0, timedelta(hours=36)):
        with Runtime("sqlite:///:memory:", tools=TOOLS, clock=clock, retention=value) as rt:
            assert rt.retention == timedelta(hours=36)
    with Runtime("sqlite:///:memory:", tools=TOOLS, clock=clock) as rt:
        assert rt.retention == timedelta(days=7)


def test_a_dry_run_counts_what_a_prune_would_delete_and_deletes_nothing(
    rt: Runtime, clock: FakeClock
) -> None:
    rt.submit("note", {"ref": "a"}, idempotency_key="k1")
    rt.enqueue_action("note", {"ref": "b"})
    rt.worker().drain()
    clock.advance(8 * DAY)
    dry = rt.prune(dry_run=True)
    assert (dry.counts.tasks, dry.counts.idempotency_keys, dry.dry_run) == (2, 1, True)
    assert len(rt.tasks()) == 2
    assert rt.prune().counts == dry.counts
    assert rt.tasks() == []


def test_a_pass_deletes_in_batches_and_finds_everything_across_pages(
    rt: Runtime, clock: FakeClock
) -> None:
    ids = [rt.enqueue_action("note", {"ref": str(i)}).task_id for i in range(23)]
    rt.worker().drain()
    clock.advance(8 * DAY)
    keep = rt.enqueue_action("note", {"ref": "new"})
    transactions: list[int] = []
    real = rt.backend.transact

    def counting(fn: Any, **kw: Any) -> Any:
        result = real(fn, **kw)
        if hasattr(result, "tasks"):
            transactions.append(result.tasks)
        return result

    rt.backend.transact = counting  # type: ignore[method-assign]
    try:
        report = rt.prune(batch_size=5)
    finally:
        rt.backend.transact = real  # type: ignore[method-assign]
    assert report.counts.tasks == 23 and report.complete
    assert max(transactions) <= 5 and sum(transactions) == 23
    assert not any(exists(rt, i) for i in ids) and exists(rt, keep.task_id)


def test_a_stopped_pass_ends_after_its_batch(rt: Runtime, clock: FakeClock) -> None:
    import threading

    for i in range(6):
        rt.enqueue_action("note", {"ref": str(i)})
    rt.worker().drain()
    clock.advance(8 * DAY)
    stop = threading.Event()
    stop.set()
    report = rt.prune(batch_size=2, stop=stop)
    assert not report.complete and report.counts.tasks <= 2
    assert rt.prune().counts.tasks == 6 - report.counts.tasks


def test_a_serving_worker_prunes_by_itself(
    backend_url: str, clock: FakeClock
) -> None:
    import time

    with Runtime(
        backend_url, tools=TOOLS, policies=POLICY, clock=clock, retention="1h"
    ) as rt:
        task = rt.enqueue_action("note", {"ref": "n"})
        worker = rt.worker(
                prune_interval=60, heartbeat_interval=3600, heartbeat_timeout=7200
            ).start()
        try:
            deadline = time.monotonic() + 30
            while rt.task(task.task_id).status != TaskStatus.SUCCEEDED:
                assert time.monotonic() < deadline, "the worker did not run the task"
                time.sleep(0.01)
                clock.advance(0.1)  # a receiver may wait on the fake clock
            clock.advance(2 * 3600)  # past the retention, and past the pruner's wait
            while exists(rt, task.task_id):
                assert time.monotonic() < deadline, "the worker did not prune"
                time.sleep(0.01)
                clock.advance(60)
        finally:
            stop_on_the_fake_clock(worker, clock)
        assert worker.stats["pruned_tasks"] == 1


def test_a_window_pass_reads_only_what_became_old_since_the_last_pass(
    rt: Runtime, clock: FakeClock
) -> None:
    late = rt.enqueue_action("note", {"ref": "run late"}, delay=9 * 86400)
    clock.advance(8 * DAY)
    first = rt.prune()
    early = rt.enqueue_action("note", {"ref": "early"})
    rt.worker().drain()
    clock.advance(DAY)
    rt.worker().drain()  # runs the late one: created 9 days before it finished
    assert rt.task(late.task_id).status == TaskStatus.SUCCEEDED
    clock.advance(7 * DAY + timedelta(seconds=1))
    window = rt.prune(since=first.now)
    assert not exists(rt, early.task_id)
    if rt.backend.ordered_keys:
        # Created before the window: left for the next full pass (random ids: every
        # pass reads everything, so it went already).
        assert window.counts.tasks == 1 and exists(rt, late.task_id)
        assert rt.prune(since=window.now).counts.tasks == 0
        assert rt.prune().counts.tasks == 1
    assert not exists(rt, late.task_id)


def test_the_pruning_claim_is_taken_in_turns_and_written_only_when_it_must_be(
    backend_url: str, clock: FakeClock
) -> None:
    """One worker prunes at a time; the holder's claim is rewritten only once half
    its time has passed (issue 39, item 2.8: it was rewritten at every pass, a
    write beside every application transaction), and a lapsed claim is taken."""
    from agentq.lifecycle.retention import PRUNER_TABLE, claim_pruning

    ttl = timedelta(minutes=4)
    with Runtime(backend_url, tools=TOOLS, clock=clock) as rt:
        backend = rt.backend

        def version() -> str:
            return backend.read_records(PRUNER_TABLE, ["claim"])["claim"].version

        assert claim_pruning(backend, "a", clock.now(), ttl)
        first = version()
        assert not claim_pruning(backend, "b", clock.now(), ttl)
        clock.advance(60)
        assert claim_pruning(backend, "a", clock.now(), ttl)
        assert version() == first  # still a's for 3 of its 4 minutes: nothing written
        clock.advance(90)
        assert claim_pruning(backend, "a", clock.now(), ttl)  # renewed, to 4 minutes from now
        assert version() != first
        clock.advance(150)
        assert not claim_pruning(backend, "b", clock.now(), ttl)
        clock.advance(91)
        assert claim_pruning(backend, "b", clock.now(), ttl)  # a's claim lapsed
        assert backend.get_record(PRUNER_TABLE, "claim")["owner"] == "b"  # type: ignore[index]
