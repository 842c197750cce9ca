"""Temporal batching (issue 13 item 9): delivery times rounded up to a window, and
batch handlers that run the ready tasks of a window in one call and commit all
their results and acks in one transaction."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    BatchContext,
    ConfigError,
    Decision,
    FakeClock,
    Policy,
    Runtime,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.batching import entity_offset, window_delivery
from tests.runtime._drive import advance_until_done
from tests.runtime.conftest import runtime_clock

CALLS: list[list[str]] = []
IDS: list[list[str]] = []
MODE: dict[str, Any] = {}
ENTERED = threading.Event()
RELEASE = threading.Event()


class Event(BaseModel):
    order_id: str
    amount: int = 0


class Seen(BaseModel):
    order_id: str
    batch_size: int


@tool(queue="events", batch=True, max_batch=3, batch_window="10s", timeout=30)
def aggregate(ctx: BatchContext, items: list[Event]) -> list[Seen | BaseException]:
    CALLS.append([i.order_id for i in items])
    IDS.append(ctx.task_ids)
    if MODE.get("hold") and not MODE.get("held"):  # only the first call waits
        MODE["held"] = True
        ENTERED.set()
        RELEASE.wait(30)
    if MODE.get("raise"):
        raise RuntimeError("the warehouse API is down")
    if MODE.get("wrong_length"):
        return []
    total = sum(i.amount for i in items)
    ctx.on_commit(lambda tx: tx.execute("INSERT INTO totals VALUES (?)", (total,)))
    return [
        LookupError("not yet") if i.order_id.startswith("later") else Seen(
            order_id=i.order_id, batch_size=len(items))
        for i in items
    ]  # fmt: skip


@tool(queue="plain", batch_window="10s", batch_offset_field="order_id")
def spread(ctx: ToolContext, args: Event) -> None:
    pass


@tool(queue="plain")
def unwindowed(ctx: ToolContext, args: Event) -> None:
    pass


T0 = datetime(2026, 12, 1, 9, 5, 3, tzinfo=UTC)


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> FakeClock:
    return runtime_clock(request, T0)


@pytest.fixture
def brt(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    CALLS.clear()
    IDS.clear()
    MODE.clear()
    ENTERED.clear()
    RELEASE.clear()
    policy = Policy.model_validate(
        {"defaults": {"backoff_initial": "1h"}, "tools": {"unwindowed": {"batch_window": "1m"}}}
    )
    runtime = Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=[aggregate, spread, unwindowed],
                      policies=policy, clock=clock)  # fmt: skip
    runtime.transact(lambda tx: tx.execute("CREATE TABLE totals (amount INTEGER)"))
    yield runtime
    RELEASE.set()
    runtime.close()


def totals(rt: Runtime) -> list[int]:
    return [r[0] for r in rt.transact(lambda tx: tx.execute("SELECT amount FROM totals"))]


# -- windows -----------------------------------------------------------------------


def test_the_delivery_time_is_the_end_of_the_window_the_call_falls_in() -> None:
    w = timedelta(seconds=10)
    assert window_delivery(T0, w) == T0.replace(second=10)
    assert window_delivery(T0.replace(second=9, microsecond=999_999), w) == T0.replace(second=10)
    assert window_delivery(T0.replace(second=10), w) == T0.replace(second=20)  # as the documents
    # Phase-shifted by an entity's offset: still at most one window ahead.
    off = timedelta(seconds=4)
    assert window_delivery(T0, w, off) == T0.replace(second=4)
    assert window_delivery(T0.replace(second=4), w, off) == T0.replace(second=14)


def test_an_entitys_offset_is_stable_whole_seconds_below_the_window() -> None:
    w = timedelta(seconds=10)
    offsets = {entity_offset(f"order-{i}", w) for i in range(200)}
    assert offsets == {timedelta(seconds=s) for s in range(10)}  # spread over the window
    # The same in every process and release (a fixed hash, not Python's hash()).
    assert entity_offset("order-101", w) == entity_offset("order-101", w)
    assert entity_offset("order-101", w) == timedelta(seconds=_PINNED_OFFSET)
    assert entity_offset("x", timedelta(seconds=1)) == timedelta(0)


_PINNED_OFFSET = 8  # the first 8 bytes of SHA-256('"order-101"'), mod 10


def test_enqueued_tasks_of_one_window_share_one_delivery_time(
    brt: Runtime, clock: FakeClock
) -> None:
    a = brt.enqueue_action("aggregate", {"order_id": "o1"})
    clock.advance(5)  # 09:05:08
    b = brt.enqueue_action("aggregate", {"order_id": "o2"})
    end = T0.replace(second=10)
    assert brt.task(a.task_id).next_attempt_at == end == brt.task(b.task_id).next_attempt_at
    # The policy's window wins over the tool's (none here).
    c = brt.enqueue_action("unwindowed", {"order_id": "o3"})
    assert brt.task(c.task_id).next_attempt_at == T0.replace(minute=6, second=0)
    # A scheduled call is rounded up from its own time.
    d = brt.enqueue_action("aggregate", {"order_id": "o4"}, delay=30)
    assert brt.task(d.task_id).next_attempt_at == T0.replace(second=40)


def test_an_offset_field_spreads_entities_and_keeps_each_entitys_tasks_together(
    brt: Runtime,
) -> None:
    def due(oid: str) -> datetime | None:
        return brt.task(brt.enqueue_action("spread", {"order_id": oid}).task_id).next_attempt_at

    times = {oid: {due(oid) for _ in range(3)} for oid in [f"o{i}" for i in range(20)]}
    assert all(len(t) == 1 for t in times.values())  # one instant per entity
    instants = {t.pop() for t in times.values()}
    assert len(instants) > 3  # spread across the window
    assert all(T0 < t <= T0 + timedelta(seconds=10) for t in instants if t is not None)


def test_a_bad_window_or_offset_field_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="batch_window"):
        tool(batch_window="soon")
    with pytest.raises(ConfigError, match="batch_offset_field 'nope'"):

        @tool(batch_offset_field="nope")
        def f(ctx: ToolContext, args: Event) -> None: ...

    with pytest.raises(ConfigError, match="list"):

        @tool(batch=True)
        def g(ctx: BatchContext, items: Event) -> list[Seen]: ...

    with pytest.raises(ConfigError, match="max_batch"):
        tool(batch=True, max_batch=0)


# -- batch handlers -----------------------------------------------------------------


def test_a_window_of_tasks_runs_in_batches_and_commits_each_batch_once(
    brt: Runtime, clock: FakeClock
) -> None:
    tasks = [brt.enqueue_action("aggregate", {"order_id": f"o{i}", "amount": i}) for i in range(7)]
    worker = brt.worker(queues=["events"])
    assert worker.drain() == 0  # nothing is ready before the window ends
    clock.advance(7)
    worker.drain()
    assert sorted(len(c) for c in CALLS) == [1, 3, 3]  # max_batch = 3
    assert sorted(o for c in CALLS for o in c) == [f"o{i}" for i in range(7)]
    for task in tasks:
        info = brt.task(task.task_id)
        assert info.status is TaskStatus.SUCCEEDED
        assert info.result["order_id"] == task.args["order_id"]
    # Each item's context carries its own task id (its idempotency key).
    assert sorted(i for ids in IDS for i in ids) == sorted(t.task_id for t in tasks)
    assert worker.stats["batch_commits"] == 3 and worker.stats["succeeded"] == 7
    assert sorted(totals(brt)) == sorted(sum(int(o[1:]) for o in c) for c in CALLS)


def test_a_batch_handler_gets_arguments_stored_out_of_band(
    tmp_path: Path, clock: FakeClock
) -> None:
    CALLS.clear()
    MODE.clear()
    # args_inline_bytes=0: every task's arguments are in a payload row, not its record.
    rt = Runtime(f"sqlite:///{tmp_path / 'oob.db'}", tools=[aggregate], clock=clock,
                 args_inline_bytes=0)  # fmt: skip
    rt.transact(lambda tx: tx.execute("CREATE TABLE totals (amount INTEGER)"))
    tasks = [rt.enqueue_action("aggregate", {"order_id": f"o{i}", "amount": i}) for i in range(3)]
    clock.advance(7)
    rt.worker(queues=["events"]).drain()
    assert [rt.task(t.task_id).status for t in tasks] == [TaskStatus.SUCCEEDED] * 3
    assert sorted(o for c in CALLS for o in c) == ["o0", "o1", "o2"]
    assert totals(rt) == [3]
    rt.close()


def test_an_item_that_fails_is_retried_alone(brt: Runtime, clock: FakeClock) -> None:
    ok = brt.enqueue_action("aggregate", {"order_id": "o1"})
    later = brt.enqueue_action("aggregate", {"order_id": "later-1"})
    clock.advance(7)
    brt.worker().drain()
    assert brt.task(ok.task_id).status is TaskStatus.SUCCEEDED
    info = brt.task(later.task_id)
    assert info.status is TaskStatus.RETRY_SCHEDULED and info.attempt == 2
    clock.advance(3 * 3600)  # its backoff (1 h at most)
    CALLS.clear()
    brt.worker().drain()
    assert CALLS == [["later-1"]]  # alone; it asks to be retried again
    assert brt.task(later.task_id).attempt == 3


def test_a_handler_that_raises_fails_every_item(brt: Runtime, clock: FakeClock) -> None:
    tasks = [brt.enqueue_action("aggregate", {"order_id": f"o{i}"}) for i in range(2)]
    MODE["raise"] = True
    clock.advance(7)
    brt.worker().drain()
    for t in tasks:
        info = brt.task(t.task_id)
        assert info.status is TaskStatus.RETRY_SCHEDULED
        assert "warehouse API is down" in (info.error or "")
    assert totals(brt) == []


def test_a_wrong_number_of_results_dead_letters_the_batch_saying_why(
    brt: Runtime, clock: FakeClock
) -> None:
    t = brt.enqueue_action("aggregate", {"order_id": "o1"})
    MODE["wrong_length"] = True
    clock.advance(7)
    brt.worker().drain()
    info = brt.task(t.task_id)
    assert info.status is TaskStatus.DEAD
    assert "returned 0 results for 1 tasks" in (info.error or "")



def _start_held_batch(
    brt: Runtime, clock: FakeClock, **worker_options: Any
) -> tuple[Any, threading.Thread]:
    """A worker draining the events queue in a thread, its batch handler entered
    and held (``MODE["hold"]``) until ``RELEASE`` is set."""
    MODE["hold"] = True
    clock.advance(7)
    worker = brt.worker(queues=["events"], **worker_options)
    t = threading.Thread(target=worker.drain, daemon=True)
    t.start()
    assert ENTERED.wait(30)
    return worker, t


def test_a_stale_batch_records_nothing(brt: Runtime, clock: FakeClock) -> None:
    """A task of the batch cancelled while the batch runs: its ack fails, so the
    whole batch's commit fails and none of its results is recorded."""
    tasks = [brt.enqueue_action("aggregate", {"order_id": f"o{i}", "amount": 5}) for i in range(3)]
    worker, t = _start_held_batch(brt, clock)
    brt.cancel(tasks[1].task_id)
    RELEASE.set()
    t.join(30)
    assert worker.stats["stale_completion"] == 3
    assert totals(brt) == []
    assert [brt.task(x.task_id).status for x in tasks] == [
        TaskStatus.RUNNING, TaskStatus.CANCELLED, TaskStatus.RUNNING]  # fmt: skip
    # Their leases expire and they are redelivered: the batch forms again without it.
    MODE.clear()
    clock.advance(60)
    brt.worker().drain()
    assert brt.task(tasks[0].task_id).status is TaskStatus.SUCCEEDED
    assert totals(brt) == [10]


def test_leases_are_renewed_while_a_batch_runs(brt: Runtime, clock: FakeClock) -> None:
    tasks = [brt.enqueue_action("aggregate", {"order_id": f"o{i}"}) for i in range(3)]
    worker, t = _start_held_batch(brt, clock, monitor_interval=1.0)
    for _ in range(25):  # 25 s of fake time: two and a half lease lengths
        clock.wait_for_sleepers(1)
        clock.advance(1)
    assert brt.worker(queues=["events"]).drain() == 0  # nothing was redelivered
    RELEASE.set()
    t.join(30)
    assert worker.stats["renewed"] >= 6
    assert all(brt.task(x.task_id).deliveries == 1 for x in tasks)
    assert all(brt.task(x.task_id).status is TaskStatus.SUCCEEDED for x in tasks)


def test_a_batch_that_overruns_its_timeout_fails_every_item(
    brt: Runtime, clock: FakeClock
) -> None:
    tasks = [brt.enqueue_action("aggregate", {"order_id": f"o{i}"}) for i in range(2)]
    worker, t = _start_held_batch(brt, clock, monitor_interval=1.0)
    advance_until_done(clock, t, seconds=40)
    t.join(10)
    assert not t.is_alive()
    assert worker.stats["timed_out"] == 2
    for x in tasks:
        info = brt.task(x.task_id)
        assert info.status is TaskStatus.RETRY_SCHEDULED and "timeout" in (info.error or "")
    RELEASE.set()


def test_a_task_that_needs_approval_joins_a_batch_only_once_approved(
    tmp_path: Path, clock: FakeClock
) -> None:
    CALLS.clear()
    MODE.clear()
    policy = Policy.model_validate({"approvals": [{"tool": "aggregate", "field": "amount",
                                                   "above": 100}]})  # fmt: skip
    rt = Runtime(f"sqlite:///{tmp_path / 'a.db'}", tools=[aggregate], policies=policy, clock=clock)
    try:
        rt.transact(lambda tx: tx.execute("CREATE TABLE totals (amount INTEGER)"))
        small = rt.enqueue_action("aggregate", {"order_id": "small", "amount": 5})
        big = rt.enqueue_action("aggregate", {"order_id": "big", "amount": 500})
        clock.advance(7)
        rt.worker().drain()
        assert CALLS == [["small"]]
        assert rt.task(big.task_id).status is TaskStatus.AWAITING_APPROVAL
        rt.approve(rt.task(big.task_id).approval_id or "", by="ops")
        clock.advance(1)
        rt.worker().drain()
        assert CALLS == [["small"], ["big"]]
        assert rt.task(small.task_id).status is TaskStatus.SUCCEEDED
        assert rt.task(big.task_id).status is TaskStatus.SUCCEEDED
    finally:
        rt.close()


def test_a_decision_can_batch_its_own_tasks(brt: Runtime, clock: FakeClock) -> None:
    def decide(tx: Decision) -> list[str]:
        return [tx.enqueue("aggregate", {"order_id": f"d{i}"}).task_id for i in range(3)]

    ids = brt.transact(decide)
    clock.advance(7)
    brt.worker().drain()
    assert CALLS == [["d0", "d1", "d2"]]
    assert all(brt.task(i).status is TaskStatus.SUCCEEDED for i in ids)


def test_a_producer_without_the_tools_code_rounds_to_the_recorded_window(
    brt: Runtime, clock: FakeClock
) -> None:
    brt.record_tools()  # as `agentq init` does
    producer = Runtime(brt.backend.url, clock=clock)
    try:
        task = producer.enqueue_action("aggregate", {"order_id": "p1"})
        assert producer.task(task.task_id).next_attempt_at == T0.replace(second=10)
        spread_task = producer.enqueue_action("spread", {"order_id": "order-101"})
        own = brt.enqueue_action("spread", {"order_id": "order-101"})
        assert spread_task.next_attempt_at == own.next_attempt_at  # same offset, same instant
    finally:
        producer.close()


def test_a_stale_batch_fails_as_a_whole(brt: Runtime, clock: FakeClock) -> None:
    """The batch's leases lapse (nothing renews them here) while it runs; the tasks
    are redelivered, run again and commit. The first run's commit then finds the
    messages gone: none of its results, acks or writes is recorded."""
    tasks = [brt.enqueue_action("aggregate", {"order_id": f"o{i}", "amount": 1}) for i in range(3)]
    worker, t = _start_held_batch(brt, clock, monitor_interval=3600)  # its monitor never runs
    clock.advance(13)  # the leases expired (10 s) and the redelivery backoff passed
    for _ in range(3000):  # the drain leases them again and the second run commits
        if all(brt.task(x.task_id).status is TaskStatus.SUCCEEDED for x in tasks):
            break
        threading.Event().wait(0.01)
    RELEASE.set()
    t.join(30)
    # The drain may return before the first run's commit: the second claims took
    # the tasks' places in the worker's in-flight table. Wait for that commit.
    for _ in range(3000):
        if worker.stats["stale_completion"] == 3:
            break
        threading.Event().wait(0.01)
    assert len(CALLS) == 2
    assert worker.stats["succeeded"] == 3 and worker.stats["stale_completion"] == 3
    assert totals(brt) == [3]  # the second run's row only
    assert all(brt.task(x.task_id).deliveries == 2 for x in tasks)


@tool(queue="async_events", batch=True)
async def aggregate_async(ctx: BatchContext, items: list[Event]) -> list[Seen]:
    return [Seen(order_id=i.order_id, batch_size=len(items)) for i in items]


def test_an_async_batch_handler_runs_on_the_event_loop(tmp_path: Path, clock: FakeClock) -> None:
    rt = Runtime(f"sqlite:///{tmp_path / 'x.db'}", tools=[aggregate_async], clock=clock)
    try:
        tasks = [rt.enqueue_action("aggregate_async", {"order_id": f"a{i}"}) for i in range(4)]
        rt.worker().drain()
        assert [rt.task(t.task_id).result["batch_size"] for t in tasks] == [4, 4, 4, 4]
    finally:
        rt.close()


def test_policy_batch_settings_are_validated() -> None:
    from pydantic import ValidationError

    policy = Policy.model_validate({"tools": {"x": {"batch_window": "10s", "max_batch": 20}}})
    assert policy.for_tool("x").batch_window == timedelta(seconds=10)
    with pytest.raises(ValidationError, match="max_batch"):
        Policy.model_validate({"tools": {"x": {"max_batch": 0}}})
    with pytest.raises(ValidationError, match="batch_window"):
        Policy.model_validate({"tools": {"x": {"batch_window": "soon"}}})
