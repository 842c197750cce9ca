"""Retention of the records besides tasks that grow with use (issue 14): dedupe
keys, per-key slot records and the records of long-gone workers are deleted
once older than the retention, never while still needed, and each feature works
after a prune. Time moves on the injected fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Policy, Runtime, TaskStatus, ToolContext, tool
from agentq.backends import Transaction
from agentq.executor.heartbeat import Heartbeat
from agentq.keylimits import KEY_SLOTS, acquire, renew, slot_key
from agentq.ledger import Tables
from agentq.lifecycle import dedupe

DAY = timedelta(days=1)


class Profile(BaseModel):
    user_id: int


class Refund(BaseModel):
    merchant_id: str
    n: int = 0


@tool(queue="work")
def reindex(ctx: ToolContext, args: Profile) -> None:
    pass


@tool(queue="work")
def refund(ctx: ToolContext, args: Refund) -> None:
    pass


POLICY = Policy.model_validate(
    {"tools": {"refund": {"concurrency_key": "merchant_id", "max_in_flight": 1}}}
)


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(backend_url, tools=[reindex, refund], policies=POLICY, clock=clock)
    yield runtime
    runtime.close()


def keys(rt: Runtime, table: str) -> list[str]:
    return [k for k, _ in rt.backend.list_records(table)]


# -- dedupe keys --------------------------------------------------------------------


def test_a_dedupe_key_goes_with_its_task_and_collapses_again_afterwards(
    rt: Runtime, clock: FakeClock
) -> None:
    old = rt.submit("reindex", {"user_id": 1}, dedupe_key="user:1")
    rt.worker().drain()
    clock.advance(3 * DAY)
    young = rt.submit("reindex", {"user_id": 3}, dedupe_key="user:3")
    rt.worker().drain()
    # Still pending after 8 days (a far delivery): its key must keep collapsing.
    pending = rt.submit("reindex", {"user_id": 2}, dedupe_key="user:2", delay=30 * DAY)
    assert sorted(keys(rt, dedupe.TABLE)) == ["reindex:user:1", "reindex:user:2", "reindex:user:3"]
    clock.advance(5 * DAY)
    assert rt.prune(dry_run=True).counts.dedupe_keys == 1  # counted with its task, kept
    assert len(keys(rt, dedupe.TABLE)) == 3
    report = rt.prune()
    assert (report.counts.tasks, report.counts.dedupe_keys) == (1, 1)
    assert sorted(keys(rt, dedupe.TABLE)) == ["reindex:user:2", "reindex:user:3"]
    assert rt.task(young.task.task_id).status == TaskStatus.SUCCEEDED
    # The pending task's key still collapses; the pruned key makes a new task, which
    # the next call collapses into.
    again = rt.submit("reindex", {"user_id": 2}, dedupe_key="user:2", delay=30 * DAY)
    assert again.collapsed and again.task.task_id == pending.task.task_id
    fresh = rt.submit("reindex", {"user_id": 1}, dedupe_key="user:1", delay=DAY)
    assert fresh.created and fresh.task.task_id != old.task.task_id
    burst = rt.submit("reindex", {"user_id": 1}, dedupe_key="user:1", delay=DAY)
    assert burst.collapsed and burst.task.task_id == fresh.task.task_id
    assert rt.prune().counts.dedupe_keys == 0


def test_a_dedupe_key_left_by_an_already_pruned_task_goes_in_the_next_pass(
    rt: Runtime, clock: FakeClock
) -> None:
    # A database pruned by an earlier release: the task is gone, its key is not.
    rt.submit("reindex", {"user_id": 5}, dedupe_key="user:5")
    rt.worker().drain()
    clock.advance(8 * DAY)

    def forget_task(tx: Transaction) -> None:
        (task_id,) = keys(rt, Tables.TASKS)
        tx.delete_record(Tables.TASKS, task_id)

    rt.backend.transact(forget_task)
    assert keys(rt, dedupe.TABLE) == ["reindex:user:5"]
    assert rt.prune().counts.dedupe_keys == 1 and keys(rt, dedupe.TABLE) == []


# -- per-key slot records -----------------------------------------------------------


def _take(rt: Runtime, merchant: str, task_id: str) -> str:
    key = slot_key("refund", {"merchant_id": merchant}, "merchant_id")
    rt.backend.transact(lambda tx: acquire(tx, key, task_id, 1, 1))
    return key


def test_a_stale_slot_record_goes_and_a_held_or_awaited_one_stays(
    rt: Runtime, clock: FakeClock
) -> None:
    running = rt.enqueue_action("refund", {"merchant_id": "m-run", "n": 1})
    waiter = rt.enqueue_action("refund", {"merchant_id": "m-wait", "n": 2})
    # Slots as workers leave them: one held by a task that is running, one by a
    # worker that died (the task's record long gone), one awaited by a queued task.
    held = _take(rt, "m-run", running.task_id)
    stale = _take(rt, "m-gone", "tsk_of_a_dead_worker")
    awaited = _take(rt, "m-wait", "tsk_of_another_dead_worker")
    _take(rt, "m-wait", waiter.task_id)  # every slot taken: it waits
    assert sorted(keys(rt, KEY_SLOTS)) == sorted([held, stale, awaited])
    clock.advance(DAY)
    assert rt.prune().counts.key_slots == 0  # expired only a day ago: kept
    clock.advance(7 * DAY)
    # The running task's worker extends its slot with its lease renewals.
    rt.backend.transact(lambda tx: renew(tx, [(held, running.task_id, 1)]))
    assert rt.prune(dry_run=True).counts.key_slots == 1
    report = rt.prune()
    assert report.counts.key_slots == 1
    assert sorted(keys(rt, KEY_SLOTS)) == sorted([held, awaited])
    # The limit still admits on every key: the pruned one as a new key.
    late = rt.enqueue_action("refund", {"merchant_id": "m-gone", "n": 3})
    rt.worker().drain()
    for task in (running, waiter, late):
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert keys(rt, KEY_SLOTS) == []  # each freed its slot, and no one waits


def test_a_slot_record_of_a_tool_that_keeps_its_tasks_is_kept(
    backend_url: str, clock: FakeClock
) -> None:
    policy = Policy.model_validate({"tools": {"refund": {
        "concurrency_key": "merchant_id", "max_in_flight": 1, "retention": "off"}}})  # fmt: skip
    with Runtime(backend_url, tools=[reindex, refund], policies=policy, clock=clock) as rt:
        key = _take(rt, "m-kept", "tsk_gone")
        clock.advance(30 * DAY)
        assert rt.prune().counts.key_slots == 0 and keys(rt, KEY_SLOTS) == [key]
        assert rt.prune(older_than=timedelta(0)).counts.key_slots == 1


# -- worker records -----------------------------------------------------------------


@pytest.fixture
def sqlite_rt(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=[reindex], clock=clock)
    yield runtime
    runtime.close()


def heartbeat(rt: Runtime, worker_id: str) -> Heartbeat:
    return Heartbeat(rt.worker(), 5.0, None, worker_id=worker_id)


def test_the_record_of_a_long_gone_worker_goes_and_a_live_ones_stays(
    sqlite_rt: Runtime, clock: FakeClock
) -> None:
    rt = sqlite_rt
    gone, live, recent = (heartbeat(rt, n) for n in ("gone", "live", "recent"))
    gone.publish()  # killed here: it never beats again
    clock.advance(8 * DAY - timedelta(minutes=30))
    recent.publish()  # stopped beating 30 minutes ago
    clock.advance(timedelta(minutes=30))
    live.publish()
    assert {w.worker_id for w in rt.workers()} == {"gone", "live", "recent"}
    assert rt.prune(dry_run=True).counts.worker_records == 1
    assert rt.prune().counts.worker_records == 1
    assert {w.worker_id for w in rt.workers()} == {"live", "recent"}
    # However short the asked-for period, a worker heard from within the last hour stays.
    clock.advance(1)
    assert rt.prune(older_than=timedelta(0)).counts.worker_records == 0
    clock.advance(timedelta(minutes=31))
    assert rt.prune(older_than=timedelta(0)).counts.worker_records == 1
    assert {w.worker_id for w in rt.workers()} == {"live"}
    # A worker heard from again after its record went is listed again.
    live.publish()
    gone.publish()
    assert {w.worker_id for w in rt.workers()} == {"gone", "live"}


def test_a_worker_record_that_beat_between_the_read_and_the_delete_is_kept(
    sqlite_rt: Runtime, clock: FakeClock
) -> None:
    from agentq.lifecycle import retention_records

    rt = sqlite_rt
    late = heartbeat(rt, "late")
    late.publish()
    clock.advance(8 * DAY)
    real_transact = rt.backend.transact
    beaten: list[bool] = []

    def beat_first(fn: Any, **kw: Any) -> Any:
        if not beaten:  # its beat commits after the pruner's read, before its delete
            beaten.append(True)
            late.publish()
        return real_transact(fn, **kw)

    sweep = retention_records.prune_workers(rt.backend, DAY, clock.now(), 200, dry_run=False)
    rt.backend.transact = beat_first  # type: ignore[method-assign]
    try:
        assert sum(sweep) == 0
    finally:
        rt.backend.transact = real_transact  # type: ignore[method-assign]
    assert [w.worker_id for w in rt.workers()] == ["late"]


# -- guards: what needs no pruning keeps working through one ------------------------


class Period(BaseModel):
    label: str = "hourly"


@tool(queue="reports", every="1h")
def hourly_report(ctx: ToolContext, args: Period) -> None:
    pass


def test_a_schedule_keeps_its_next_run_and_goes_on_after_its_old_runs_are_pruned(
    tmp_path: Path, clock: FakeClock
) -> None:
    url = f"sqlite:///{tmp_path / 'schedules.db'}"
    with Runtime(url, tools=[hourly_report], clock=clock, retention="1d") as rt:
        rt.sync_schedules()
        worker = rt.worker()
        for _ in range(48):
            clock.advance(timedelta(hours=1))
            assert worker.drain() == 1
        pending = [t for t in rt.tasks() if not t.done]
        assert len(pending) == 1
        clock.advance(1)
        report = rt.prune(older_than=timedelta(0))
        assert report.counts.tasks == 48
        assert [t.task_id for t in rt.tasks()] == [pending[0].task_id]
        [schedule] = rt.schedules()
        assert schedule.pending_task_id == pending[0].task_id and schedule.runs == 48
        clock.advance(timedelta(hours=1))
        assert worker.drain() == 1
        [schedule] = rt.schedules()
        assert schedule.runs == 49 and schedule.next_run is not None


def test_a_waiting_tasks_list_survives_a_prune_and_goes_with_its_prerequisite(
    rt: Runtime, clock: FakeClock
) -> None:
    first = rt.enqueue_action("reindex", {"user_id": 1}, delay=30 * DAY)
    waiter = rt.enqueue_action("reindex", {"user_id": 2}, after=[first.task_id])
    clock.advance(20 * DAY)
    rt.prune(older_than=timedelta(0))
    assert keys(rt, Tables.JOINS) == [first.task_id]
    clock.advance(11 * DAY)
    rt.worker().drain()
    assert rt.task(waiter.task_id).status == TaskStatus.SUCCEEDED
    assert keys(rt, Tables.JOINS) == []
