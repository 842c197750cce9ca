"""The task lifecycle: cancel, approve, reject, replay, schedule, ordering keys,
idempotency and internal tools, each through agentq.lifecycle (issue 9)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    AgentQError,
    ApprovalError,
    ApprovalNotice,
    ApprovalStatus,
    FakeClock,
    IdempotencyConflict,
    IllegalTransition,
    InvalidArguments,
    PayloadTooLarge,
    PermanentError,
    Runtime,
    TaskNotFound,
    TaskStatus,
    ToolContext,
    ToolError,
    tool,
)
from agentq.ledger import Tables
from agentq.lifecycle import TASK_TRANSITIONS, Event, task_table_markdown
from agentq.lifecycle.states import NEW
from agentq.policies import ApprovalRule, Defaults, Policy

ROOT = Path(__file__).resolve().parents[2]
CALLS: list[tuple[str, str]] = []


class PayArgs(BaseModel):
    ref: str
    amount: float


class BlobArgs(BaseModel):
    data: str


@tool(queue="work")
def pay(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    CALLS.append(("pay", ctx.task_id))
    return {"paid": args.amount}


@tool(queue="work")
def blob(ctx: ToolContext, args: BlobArgs) -> dict[str, Any]:
    CALLS.append(("blob", ctx.task_id))
    return {"size": len(args.data)}


@tool(queue="notices")
def notify(ctx: ToolContext, args: ApprovalNotice) -> dict[str, Any]:
    CALLS.append(("notify", args.approval_id))
    return {}


@tool(queue="notices")
def page(ctx: ToolContext, args: ApprovalNotice) -> dict[str, Any]:
    CALLS.append(("page", args.approval_id))
    return {}


FAILING: set[str] = set()


@tool(queue="work")
def flaky(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    CALLS.append(("flaky", ctx.task_id))
    if args.ref in FAILING:
        raise PermanentError(f"{args.ref} is told to fail")
    return {}


@tool(queue="work", visible=False)
def hidden(ctx: ToolContext, args: BlobArgs) -> dict[str, Any]:
    return {}


POLICY = Policy(
    defaults=Defaults(notify_tool="notify", escalation_tool="page"),
    approvals=(ApprovalRule(tool="pay", field="amount", above=100),),
)


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    CALLS.clear()
    runtime = Runtime(
        backend_url,
        tools=[pay, blob, flaky, notify, page, hidden],
        policies=POLICY,
        clock=clock,
    )
    yield runtime
    runtime.close()


def ran(name: str) -> int:
    return sum(1 for n, _ in CALLS if n == name)


def depth(rt: Runtime, queue: str) -> int:
    return rt.backend.stats(queue).depth


# -- defect 1: cancel of a task awaiting approval -------------------------------------


def test_cancel_voids_the_approval_and_its_timers_so_a_later_approve_runs_nothing(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("pay", {"ref": "r1", "amount": 500})
    assert task.status == TaskStatus.AWAITING_APPROVAL
    approval = rt.approval(task.approval_id or "")
    cancelled = rt.cancel(task.task_id)
    assert cancelled.status == TaskStatus.CANCELLED
    assert rt.approval(approval.approval_id).status == ApprovalStatus.VOID
    assert rt.task(approval.escalation_task_id or "").status == TaskStatus.CANCELLED
    assert rt.task(approval.notify_task_id or "").status == TaskStatus.CANCELLED
    assert depth(rt, "notices") == 0  # the 72 h escalation and the notice are deleted
    with pytest.raises(ApprovalError, match=r"already void.*approve is not allowed"):
        rt.approve(approval.approval_id, by="manager")
    with pytest.raises(ApprovalError, match="already void"):
        rt.reject(approval.approval_id, by="manager")
    clock.advance(timedelta(hours=100))
    rt.worker().drain()
    assert CALLS == []  # not charged, nobody paged, nobody notified
    assert rt.task(task.task_id).status == TaskStatus.CANCELLED


def test_cancel_of_a_finished_task_is_refused_naming_task_state_and_event(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"ref": "r1", "amount": 5})
    rt.worker().drain()
    with pytest.raises(IllegalTransition, match=rf"task '{task.task_id}' is succeeded: cancel"):
        rt.cancel(task.task_id)
    with pytest.raises(TaskNotFound):
        rt.cancel("tsk_nope")


def test_cancel_after_approval_deletes_the_sent_message(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"ref": "r1", "amount": 500})
    rt.approve(task.approval_id or "", by="alice")
    rt.cancel(task.task_id)
    rt.worker().drain()
    assert ran("pay") == 0 and depth(rt, "work") == 0


# -- defect 2: replay ----------------------------------------------------------------


def test_replay_never_resurrects_a_finished_task_from_a_stray_entry(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"ref": "r1", "amount": 5})
    rt.worker().drain()
    assert ran("pay") == 1
    # A stray message under the finished task's id (written around agentq).
    rt.backend.transact(lambda tx: tx.send("work", (task.task_id, 7), {"junk": True}))
    rt.worker().drain()
    entries = rt.dead_letters()
    assert len(entries) == 1
    with pytest.raises(AgentQError):
        rt.replay(str(entries[0]["entry_id"]))
    with pytest.raises(IllegalTransition, match="is succeeded: replay"):
        rt.replay(task.task_id)
    rt.worker().drain()
    assert ran("pay") == 1 and rt.task(task.task_id).status == TaskStatus.SUCCEEDED


@pytest.mark.parametrize("state", ["queued", "running", "cancelled", "awaiting_approval"])
def test_replay_of_a_task_that_is_not_dead_is_refused(rt: Runtime, state: str) -> None:
    amount = 500 if state == "awaiting_approval" else 5
    task = rt.enqueue_action("pay", {"ref": "r1", "amount": amount})
    if state == "cancelled":
        rt.cancel(task.task_id)
    if state == "running":
        rt.backend.transact(
            lambda tx: tx.put_record(
                Tables.TASKS, task.task_id,
                {**(tx.get_record(Tables.TASKS, task.task_id) or {}), "status": "running"},
            )
        )  # fmt: skip
    with pytest.raises(IllegalTransition, match=f"is {state}: replay is not allowed"):
        rt.replay(task.task_id)


def test_replay_all_skips_and_reports_and_entries_can_be_deleted(rt: Runtime) -> None:
    dead = rt.transact(lambda tx: tx.enqueue("pay", {"ref": "d", "amount": 5}))
    rt.backend.transact(
        lambda tx: tx.put_record(
            Tables.TASKS, dead.task_id,
            {**(tx.get_record(Tables.TASKS, dead.task_id) or {}), "tool": "gone_tool"},
        )
    )  # fmt: skip
    rt.worker(unknown_tool_grace=0).drain()  # unknown tool, no grace: dead-lettered
    good = rt.enqueue_action("blob", {"data": "x"})
    rt.backend.transact(lambda tx: tx.send("work", ("not-a-task", 1), "garbage"))
    rt.worker().drain()
    assert rt.task(dead.task_id).status == TaskStatus.DEAD
    ids = {str(e["entry_id"]) for e in rt.dead_letters()}
    assert dead.task_id in ids and len(ids) == 2 and good.task_id not in ids
    report = rt.replay_all()
    assert report.replayed == []
    assert set(report.skipped) == ids  # unknown tool, stray: both reported, none stopped
    assert "unknown tool" in report.skipped[dead.task_id]
    assert sorted(rt.delete_dead_letters([*ids, "nope"])) == sorted(ids)
    assert rt.dead_letters() == []
    assert rt.task(dead.task_id).status == TaskStatus.DEAD  # the ledger keeps it


def test_replay_of_a_dead_task_runs_it_once_more(rt: Runtime) -> None:
    FAILING.add("r1")
    task = rt.enqueue_action("flaky", {"ref": "r1", "amount": 5})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    FAILING.clear()
    replayed = rt.replay(task.task_id)
    assert replayed.status == TaskStatus.QUEUED and replayed.attempt == 2
    with pytest.raises(IllegalTransition, match="is queued: replay"):
        rt.replay(task.task_id)  # its entry is gone and it is no longer dead
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED and ran("flaky") == 2


# -- defect 3: a scheduled call that needs approval keeps its time -------------------


def test_scheduled_call_approved_early_runs_at_its_time(rt: Runtime, clock: FakeClock) -> None:
    start = clock.now()
    task = rt.transact(
        lambda tx: tx.schedule("pay", {"ref": "r", "amount": 500}, at=start + timedelta(hours=24))
    )
    assert task.status == TaskStatus.AWAITING_APPROVAL
    clock.advance(timedelta(hours=1))
    rt.approve(task.approval_id or "", by="alice")
    rt.worker().drain()
    assert ran("pay") == 0
    clock.advance(timedelta(hours=22, minutes=59))
    rt.worker().drain()
    assert ran("pay") == 0
    clock.advance(timedelta(minutes=1))
    rt.worker().drain()
    assert ran("pay") == 1


def test_scheduled_call_approved_late_runs_at_once(rt: Runtime, clock: FakeClock) -> None:
    start = clock.now()
    task = rt.transact(
        lambda tx: tx.schedule("pay", {"ref": "r", "amount": 500}, at=start + timedelta(hours=2))
    )
    clock.advance(timedelta(hours=30))
    rt.approve(task.approval_id or "", by="alice")
    rt.worker().drain()
    assert ran("pay") == 1


# -- defect 4: every enqueue path checks the envelope ---------------------------------


def test_oversized_or_non_finite_args_are_refused_on_every_enqueue_path(rt: Runtime) -> None:
    head = rt.enqueue_action("blob", {"data": "x"}, ordering_key="k")
    huge = {"data": "x" * (70 * 1024)}
    with pytest.raises(PayloadTooLarge, match="tool 'blob'"):
        rt.enqueue_action("blob", huge, ordering_key="k")  # behind the head: not sent now
    with pytest.raises(PayloadTooLarge):
        rt.enqueue_action("blob", huge)
    with pytest.raises(InvalidArguments, match=r"amount: nan is not a finite number"):
        rt.enqueue_action("pay", {"ref": "r", "amount": math.nan}, ordering_key="k")
    with pytest.raises(InvalidArguments, match="amount: inf"):
        rt.enqueue_action("pay", {"ref": "r", "amount": math.inf})
    with pytest.raises(PayloadTooLarge):
        rt.transact(lambda tx: tx.request_approval("blob", huge))
    nxt = rt.enqueue_action("blob", {"data": "y"}, ordering_key="k")
    rt.worker().drain()
    assert rt.task(head.task_id).status == TaskStatus.SUCCEEDED
    assert rt.task(nxt.task_id).status == TaskStatus.SUCCEEDED
    assert ran("blob") == 2


def test_empty_ordering_key_is_refused(rt: Runtime) -> None:
    with pytest.raises(InvalidArguments, match="ordering_key must be a non-empty string"):
        rt.enqueue_action("blob", {"data": "x"}, ordering_key="")
    with pytest.raises(InvalidArguments, match="idempotency_key"):
        rt.enqueue_action("blob", {"data": "x"}, idempotency_key="")
    assert rt.tasks() == []


def test_ordering_key_releases_past_a_cancelled_waiter_and_keeps_schedules(
    rt: Runtime, clock: FakeClock
) -> None:
    a = rt.enqueue_action("blob", {"data": "a"}, ordering_key="k")
    b = rt.enqueue_action("blob", {"data": "b"}, ordering_key="k")
    later = clock.now() + timedelta(hours=5)
    c = rt.transact(lambda tx: tx.enqueue("blob", {"data": "c"}, ordering_key="k", at=later))
    rt.cancel(b.task_id)
    rt.worker().drain()
    assert rt.task(a.task_id).status == TaskStatus.SUCCEEDED
    assert rt.task(c.task_id).status == TaskStatus.QUEUED  # released, but not before its time
    clock.advance(timedelta(hours=5))
    rt.worker().drain()
    assert rt.task(c.task_id).status == TaskStatus.SUCCEEDED


# -- defect 10: internal tools --------------------------------------------------------


def test_internal_tools_are_not_offered_nor_enqueueable(rt: Runtime) -> None:
    names = {s["function"]["name"] for s in rt.tool_schemas()}
    # notify/page are the policy's notice tools; hidden opts out of being shown
    assert names == {"pay", "blob", "flaky"}
    notice = {"approval_id": "apr_x", "tool": "pay", "args": {"ref": "r", "amount": 48}}
    for name in ("notify", "page"):
        with pytest.raises(ToolError, match="internal"):
            rt.enqueue_action(name, notice)
        with pytest.raises(ToolError, match="internal"):
            rt.transact(lambda tx, n=name: tx.enqueue(n, notice))
    assert rt.enqueue_action("hidden", {"data": "x"}).status == TaskStatus.QUEUED
    assert rt.tasks(status="queued")[0].tool == "hidden"


def test_shipped_notice_tools_are_internal(tmp_path: Path, clock: FakeClock) -> None:
    with Runtime(
        f"sqlite:///{tmp_path / 'r.db'}", tools=ROOT / "tools", policies=ROOT / "policies",
        clock=clock,
    ) as rt:  # fmt: skip
        names = {s["function"]["name"] for s in rt.tool_schemas()}
        assert "request_approval" not in names and "escalate" not in names
        assert "execute_refund" in names


# -- defect 11: idempotency ---------------------------------------------------------


def test_idempotency_key_with_other_args_is_a_conflict_naming_the_task(rt: Runtime) -> None:
    first = rt.enqueue_action("pay", {"ref": "r", "amount": 5}, idempotency_key="call-1")
    same = rt.enqueue_action("pay", {"amount": 5.0, "ref": "r"}, idempotency_key="call-1")
    assert same.task_id == first.task_id
    with pytest.raises(IdempotencyConflict, match=f"belongs to task '{first.task_id}'"):
        rt.enqueue_action("pay", {"ref": "r", "amount": 6}, idempotency_key="call-1")
    with pytest.raises(IdempotencyConflict, match="of tool 'pay', not 'blob'"):
        rt.enqueue_action("blob", {"data": "x"}, idempotency_key="call-1")
    assert len(rt.tasks()) == 1 and rt.task(first.task_id).args["amount"] == 5


# -- defect 12: approval rules are exact and fail closed -------------------------------


def test_approval_rule_compares_exactly(rt: Runtime) -> None:
    assert rt.enqueue_action("pay", {"ref": "a", "amount": 100}).status == TaskStatus.QUEUED
    over = rt.enqueue_action("pay", {"ref": "b", "amount": 100.0000001})
    assert over.status == TaskStatus.AWAITING_APPROVAL
    rule = ApprovalRule(tool="pay", field="amount", above=100)
    # Beyond a float's precision a float comparison says "equal": that failed open.
    assert rule.applies({"amount": "100.0000000000000001"})
    assert ApprovalRule(tool="pay", field="amount", above=1e16).applies({"amount": 10**16 + 1})
    assert not rule.applies({"amount": 100})
    assert ApprovalRule(tool="pay", field="amount", above=100).applies({"amount": "nan"})
    assert ApprovalRule(tool="pay", field="amount", above=100).applies({"amount": "1e400"})


# -- the table ----------------------------------------------------------------------


def test_every_state_event_pair_is_either_a_listed_move_or_refused(rt: Runtime) -> None:
    from agentq.lifecycle import APPROVAL_TRANSITIONS
    from agentq.lifecycle.states import next_approval_state, next_task_state

    for state in [NEW, *TaskStatus]:
        for event in Event:
            expected = TASK_TRANSITIONS.get((str(state), event))
            if expected is None:
                with pytest.raises(IllegalTransition, match=f"is {state}: {event}"):
                    next_task_state("t1", None if state == NEW else state, event)
            else:
                assert next_task_state("t1", None if state == NEW else state, event) == expected
    # Finished states allow nothing but a dead task's replay.
    for final in (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED):
        assert not [e for (s, e) in TASK_TRANSITIONS if s == final]
    for astate in [NEW, *ApprovalStatus]:
        for event in Event:
            allowed = APPROVAL_TRANSITIONS.get((str(astate), event))
            current = None if astate == NEW else astate
            if allowed is None:
                with pytest.raises(ApprovalError, match=f"{astate}.*: {event} is not allowed"):
                    next_approval_state("a1", current, event)
            else:
                assert next_approval_state("a1", current, event) == allowed


def test_the_lifecycle_page_prints_the_transition_tables() -> None:
    from agentq.lifecycle import approval_table_markdown

    page = (ROOT / "docs" / "explanations" / "lifecycle.md").read_text()
    assert task_table_markdown() in page
    assert approval_table_markdown() in page


# -- expire: an approval rule's deadline --------------------------------------------


@pytest.fixture
def expiring(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    CALLS.clear()
    policy = Policy(
        defaults=Defaults(notify_tool="notify", escalation_tool="page"),
        approvals=(
            ApprovalRule(tool="pay", field="amount", above=100, escalate_after=timedelta(hours=72),
                         expire_after=timedelta(hours=48)),
        ),
    )  # fmt: skip
    runtime = Runtime(
        f"sqlite:///{tmp_path / 'ex.db'}", tools=[pay, notify, page], policies=policy, clock=clock
    )
    yield runtime
    runtime.close()


def test_an_undecided_approval_expires_and_its_call_never_runs(
    expiring: Runtime, clock: FakeClock
) -> None:
    rt = expiring
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval = rt.approval(task.approval_id or "")
    assert approval.expiry_task_id is not None
    rt.worker().drain()  # the approvers' notice
    clock.advance(timedelta(hours=48))
    rt.worker().drain()
    assert rt.approval(approval.approval_id).status == ApprovalStatus.EXPIRED
    done = rt.task(task.task_id)
    assert done.status == TaskStatus.CANCELLED and "approval expired" in (done.error or "")
    assert rt.task(approval.escalation_task_id or "").status == TaskStatus.CANCELLED
    with pytest.raises(ApprovalError, match="already expired"):
        rt.approve(approval.approval_id, by="late manager")
    clock.advance(timedelta(hours=100))
    rt.worker().drain()
    assert ran("pay") == 0 and ran("page") == 0 and ran("notify") == 1


def test_a_decision_before_the_deadline_cancels_the_expiry(
    expiring: Runtime, clock: FakeClock
) -> None:
    rt = expiring
    task = rt.enqueue_action("pay", {"ref": "r", "amount": 500})
    approval = rt.approval(task.approval_id or "")
    clock.advance(timedelta(hours=47))
    rt.approve(approval.approval_id, by="alice")
    assert rt.task(approval.expiry_task_id or "").status == TaskStatus.CANCELLED
    clock.advance(timedelta(hours=2))
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert rt.approval(approval.approval_id).status == ApprovalStatus.APPROVED


def test_a_stray_row_under_a_waiting_tasks_key_cannot_fail_the_heads_completion(
    rt: Runtime,
) -> None:
    head = rt.enqueue_action("blob", {"data": "a"}, ordering_key="k")
    nxt = rt.enqueue_action("blob", {"data": "b"}, ordering_key="k")
    # Written around agentq, under the key the waiting task will be sent with,
    # and not yet deliverable: only the head's release would collide with it.
    later = rt.clock.now() + timedelta(days=1)
    rt.backend.transact(lambda tx: tx.send("work", (nxt.task_id, 1), {"junk": 1}, later))
    rt.worker().drain()
    assert rt.task(head.task_id).status == TaskStatus.SUCCEEDED
    assert rt.task(nxt.task_id).status == TaskStatus.SUCCEEDED
    assert ran("blob") == 2
