"""Executor behaviour with small in-test tools: ordering keys, checkpoints, async
handlers, timeouts, rate limits and handler state writes."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    Checkpoint,
    Decision,
    FakeClock,
    PermanentError,
    Policy,
    Runtime,
    TaskStatus,
    ToolContext,
    WorkerCrash,
    tool,
)
from agentq.backends import Message, StoredRecord
from agentq.clock import to_micros
from agentq.executor.admission import Admission
from agentq.lifecycle import tasks as lifecycle_tasks
from tests.runtime._drive import REAL_TIMEOUT, advance_until

RUNS: list[tuple[str, int]] = []
GATE = threading.Event()
ENTERED = threading.Event()


class Step(BaseModel):
    name: str
    n: int = 0


class Done(BaseModel):
    name: str
    attempt: int


@tool(queue="work")
def record(ctx: ToolContext, args: Step) -> Done:
    RUNS.append((args.name, ctx.attempt))
    if args.name.startswith("fail-once") and ctx.attempt == 1:
        raise RuntimeError("transient")
    if args.name.startswith("permanent"):
        raise PermanentError("bad request")
    return Done(name=args.name, attempt=ctx.attempt)


@tool(queue="work")
def counted(ctx: ToolContext, args: Step) -> Done | Checkpoint:
    state = ctx.checkpoint_state or {"done": 0}
    done = int(state["done"]) + 1
    RUNS.append((args.name, done))
    if done < args.n:
        return ctx.checkpoint({"done": done}, after=60)
    return Done(name=args.name, attempt=ctx.attempt)


@tool(queue="work")
async def async_tool(ctx: ToolContext, args: Step) -> Done:
    RUNS.append((args.name, ctx.attempt))
    return Done(name=args.name, attempt=ctx.attempt)


@tool(queue="slow", timeout=5)
def slow(ctx: ToolContext, args: Step) -> Done:
    if ctx.attempt == 1:
        ENTERED.set()
        GATE.wait(10)
    return Done(name=args.name, attempt=ctx.attempt)


@tool(queue="work")
def writes_state(ctx: ToolContext, args: Step) -> Done:
    ctx.on_commit(lambda tx: tx.execute("INSERT INTO log VALUES (?)", (args.name,)))
    if args.n:
        ctx.on_commit(lambda tx: tx.enqueue("record", {"name": f"{args.name}-follow-up"}))
    return Done(name=args.name, attempt=ctx.attempt)


STARTS: dict[str, datetime] = {}  # task id -> when its handler started (the fake clock)


@tool(queue="limited")
def limited(ctx: ToolContext, args: Step) -> None:
    STARTS[ctx.task_id] = ctx.clock.now()


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    RUNS.clear()
    STARTS.clear()
    GATE.clear()
    ENTERED.clear()
    policy = Policy.model_validate(
        {"defaults": {"backoff_initial": "1s", "max_attempts": 3},
         "tools": {"record": {"rate_limit_per_second": 1000},
                   "limited": {"rate_limit_per_second": 2}}}
    )  # fmt: skip
    runtime = Runtime(
        backend_url,
        tools=[record, counted, async_tool, slow, writes_state, limited],
        policies=policy,
        clock=clock,
    )
    yield runtime
    GATE.set()
    runtime.close()


def run_all(rt: Runtime, clock: FakeClock, rounds: int = 20) -> None:
    """Drain, then jump to the next scheduled attempt, until nothing is left."""
    for _ in range(rounds):
        rt.worker().drain()
        pending = [t for t in rt.tasks() if not t.done and t.next_attempt_at]
        if not pending:
            return
        clock.set(max(clock.now(), min(t.next_attempt_at for t in pending if t.next_attempt_at)))


def test_ordering_key_runs_one_at_a_time_in_order(rt: Runtime, clock: FakeClock) -> None:
    def decide(tx: Decision) -> None:
        tx.enqueue("record", {"name": "fail-once-a1"}, ordering_key="order-1")
        tx.enqueue("record", {"name": "a2"}, ordering_key="order-1")
        tx.enqueue("record", {"name": "a3"}, ordering_key="order-1")
        tx.enqueue("record", {"name": "b1"}, ordering_key="order-2")

    rt.transact(decide)
    rt.worker().drain()
    # a1 failed and holds back a2 and a3; b1 (another key) ran.
    assert RUNS == [("fail-once-a1", 1), ("b1", 1)] or RUNS == [("b1", 1), ("fail-once-a1", 1)]
    run_all(rt, clock)
    order_1 = [name for name, _ in RUNS if name != "b1"]
    assert order_1 == ["fail-once-a1", "fail-once-a1", "a2", "a3"]
    assert all(t.status == TaskStatus.SUCCEEDED for t in rt.tasks())


def test_cancelling_a_waiting_ordered_task_releases_nothing_out_of_order(
    rt: Runtime, clock: FakeClock
) -> None:
    ids = rt.transact(
        lambda tx: [tx.enqueue("record", {"name": n}, ordering_key="k").task_id for n in "xyz"]
    )
    assert rt.cancel(ids[1]).status == TaskStatus.CANCELLED
    run_all(rt, clock)
    assert [n for n, _ in RUNS] == ["x", "z"]
    assert rt.task(ids[1]).status == TaskStatus.CANCELLED


def test_scheduled_task_is_a_timer_cancelled_in_a_transaction(
    rt: Runtime, clock: FakeClock
) -> None:
    timer = rt.transact(
        lambda tx: tx.schedule("record", {"name": "reminder"}, at=tx.now + timedelta(days=3))
    )
    rt.worker().drain()
    assert RUNS == []
    rt.transact(lambda tx: tx.cancel(timer.task_id))
    clock.advance(4 * 86400)
    rt.worker().drain()
    assert RUNS == []
    assert rt.task(timer.task_id).status == TaskStatus.CANCELLED


def test_permanent_error_goes_straight_to_the_dead_letter_queue(rt: Runtime) -> None:
    task = rt.enqueue_action("record", {"name": "permanent-x"})
    rt.worker().drain()
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.DEAD
    assert info.error == "PermanentError: bad request"
    assert len(RUNS) == 1


def test_checkpoints_ack_and_resend_with_state(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("counted", {"name": "long", "n": 3})
    rt.worker().drain()
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.QUEUED and info.attempt == 2
    clock.advance(59)
    rt.worker().drain()
    assert len(RUNS) == 1
    clock.advance(1)
    rt.worker().drain()
    clock.advance(60)
    rt.worker().drain()
    assert RUNS == [("long", 1), ("long", 2), ("long", 3)]
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED


def test_async_handlers_and_async_enqueue(rt: Runtime) -> None:
    import asyncio

    async def agent() -> str:
        task = await rt.aenqueue_action("async_tool", {"name": "from-async"}, idempotency_key="a")
        again = await rt.aenqueue_action("async_tool", {"name": "from-async"}, idempotency_key="a")
        assert again.task_id == task.task_id
        return task.task_id

    task_id = asyncio.run(agent())
    rt.worker().drain()
    info = asyncio.run(rt.atask(task_id))
    assert info.status == TaskStatus.SUCCEEDED
    assert info.result == {"name": "from-async", "attempt": 1}


def test_timeout_gives_up_the_run_and_its_late_result_is_not_recorded(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("slow", {"name": "s"})
    worker = rt.worker(monitor_interval=1.0)
    t = threading.Thread(target=worker.drain)
    t.start()
    assert ENTERED.wait(10)
    for _ in range(5):
        clock.wait_for_sleepers(1)
        clock.advance(1)
    t.join(10)  # drain returns once the timeout's failure is committed
    info = rt.task(task.task_id)
    assert worker.stats["timed_out"] == 1
    assert info.status == TaskStatus.RETRY_SCHEDULED and "timeout" in (info.error or "")
    assert info.attempt == 2
    GATE.set()  # the overrunning handler finally returns; its completion must fail
    run_all(rt, clock)
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.SUCCEEDED
    assert info.result == {"name": "s", "attempt": 2}


def test_handler_state_writes_and_follow_ups_commit_with_the_result(rt: Runtime) -> None:
    rt.transact(lambda tx: tx.execute("CREATE TABLE log (name TEXT)"))
    task = rt.enqueue_action("writes_state", {"name": "w", "n": 1})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert rt.transact(lambda tx: tx.execute("SELECT name FROM log")) == [("w",)]
    assert ("w-follow-up", 1) in RUNS


def test_failing_state_write_fails_the_attempt_and_records_nothing(
    rt: Runtime, clock: FakeClock
) -> None:
    # No "log" table: the on_commit write fails, so the result must not be recorded.
    task = rt.enqueue_action("writes_state", {"name": "w"})
    rt.worker().drain()
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.RETRY_SCHEDULED
    # SQLite: "no such table: log"; PostgreSQL: 'relation "log" does not exist'.
    assert re.search(r'no such table: log|relation "log" does not exist', info.error or "")
    assert info.result is None


def test_group_commit_isolates_a_stale_completion(rt: Runtime, clock: FakeClock) -> None:
    """Seven completions reach the committer together; one of them is stale (its task
    was cancelled while it ran). The group's transaction fails on that ack and the
    committer falls back to one at a time: the six others are recorded."""
    ids = [rt.enqueue_action("record", {"name": f"g{i}"}).task_id for i in range(7)]
    victim = ids[3]
    worker = rt.worker(concurrency=7, batch_size=7)

    def cancel_victim(info: dict[str, Any]) -> bool:
        if info.get("task_id") == victim:
            rt.cancel(victim)  # deletes its message while its handler is done but uncommitted
        return False

    class HeldUntilSeven:
        """The committer's queue: its first take waits until all seven outcomes are in."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.first = inner, True

        def get(self) -> Any:
            for _ in range(2000):
                if not self.first or self.inner.qsize() >= 7:
                    break
                threading.Event().wait(0.005)
            self.first = False
            return self.inner.get()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    worker._outcomes = HeldUntilSeven(worker._outcomes)  # type: ignore[assignment]
    rt.faults.arm("after_external_call", WorkerCrash(), when=cancel_victim, times=100)
    worker.drain()
    assert worker.stats["group_commits"] == 0  # the group of seven failed as a whole
    assert worker.stats["stale_completion"] == 1
    assert worker.stats["succeeded"] == 6
    statuses = {i: rt.task(i).status for i in ids}
    assert statuses.pop(victim) == TaskStatus.CANCELLED
    assert set(statuses.values()) == {TaskStatus.SUCCEEDED}


def test_rate_limit_is_enforced_by_the_executor(rt: Runtime, clock: FakeClock) -> None:
    """No handler starts before its turn, and the turns keep the limit.

    The turns are what the limiter guarantees; a handler's start can only be
    later (this loop advances time whenever anything sleeps, so a handler whose
    thread was slow to run starts late, in fake time, beside a later turn)."""
    for i in range(5):
        rt.enqueue_action("limited", {"name": f"r{i}"})
    worker = rt.worker(concurrency=5)
    turns: dict[str, datetime] = {}
    taken = threading.local()
    limiter = worker._limiter
    # Every turn (at most 2 s ahead) is waited for in its handler: with the default
    # 1 s, which calls are rescheduled instead depends on how the five takes
    # interleave (rescheduling is tests/runtime/test_rate_limits.py's).
    limiter.max_wait = 10.0
    take, admit = limiter.take, limiter.admit

    def recording_take(tool: str) -> tuple[datetime, bool]:
        turn: tuple[datetime, bool] = take(tool)
        taken.turn = turn
        return turn

    def recording_admit(tool: str, record: Mapping[str, Any]) -> None:
        taken.turn = None
        admit(tool, record)
        if taken.turn is not None:
            turns[record["task_id"]] = taken.turn[0]

    limiter.take, limiter.admit = recording_take, recording_admit
    t = threading.Thread(target=worker.drain)
    t.start()
    # Time passes only while a call still waits for its turn, and a step only once
    # every call without a turn sleeps until it (none is still asking for one by
    # RPC): fake seconds spent beside Spanner's RPCs would push turns apart and
    # expire the leases of calls that are running.
    advance_until(
        clock,
        lambda: len(turns) == 5,
        step=0.25,
        settled=lambda: clock.sleeping("agentq-handler-") == 5 - len(turns),
        what="five turns",
    )
    t.join(REAL_TIMEOUT)
    assert not t.is_alive()
    assert len(STARTS) == 5
    assert set(turns) == set(STARTS)  # every call took a turn
    assert all(STARTS[task] >= turns[task] for task in STARTS)
    at = sorted(turns.values())
    # A bucket of 2 tokens: two turns at once, then one every half second.
    assert all((at[i + 2] - at[i]).total_seconds() >= 0.5 for i in range(len(at) - 2))
    assert (at[-1] - at[0]).total_seconds() >= 1.5


def test_a_receiver_survives_a_failing_receive() -> None:
    """A driver error while receiving must not silently stop a queue's receiver."""
    import time

    from agentq import SystemClock

    runtime = Runtime("sqlite:///:memory:", tools=[record], clock=SystemClock())
    real_stream = runtime.backend.stream
    calls = {"n": 0}

    def flaky_stream(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("driver hiccup")
        return real_stream(*args, **kwargs)

    runtime.backend.stream = flaky_stream  # type: ignore[method-assign]
    worker = runtime.worker(receive_timeout=0.05).start()
    try:
        task = runtime.enqueue_action("record", {"name": "after-hiccup"})
        # Waits on the outcome; the bound only ends a dead receiver's wait (the retry
        # comes 0.2 s after the hiccup, but a loaded machine may take seconds more).
        deadline = time.monotonic() + 90
        while runtime.task(task.task_id).status != TaskStatus.SUCCEEDED:
            assert time.monotonic() < deadline, "the receiver died"
            time.sleep(0.01)
    finally:
        worker.stop()
        runtime.close()
    assert worker.stats["receive_errors"] == 1


def test_sqlite_task_ids_follow_the_clock_so_one_burst_shares_pages(
    rt: Runtime, clock: FakeClock
) -> None:
    first = rt.enqueue_action("record", {"name": "x"})
    clock.advance(0.001)
    burst = rt.transact(lambda tx: [tx.enqueue("record", {"name": f"n{i}"}) for i in range(50)])
    assert int(first.task_id[4:18], 16) == to_micros(clock.now()) - 1000
    assert {t.task_id[4:18] for t in burst} == {f"{to_micros(clock.now()):014x}"}
    assert all(first.task_id < t.task_id for t in burst)
    assert len({t.task_id for t in burst}) == 50


def test_claims_are_swapped_in_unless_the_record_changed_since_the_read(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = rt.transact(lambda tx: [tx.enqueue("record", {"name": f"n{i}"}) for i in range(3)])
    victim = tasks[1].task_id
    real_read = rt.backend.read_records

    def read_then_cancel(table: str, keys: Sequence[str]) -> dict[str, StoredRecord]:
        found = real_read(table, keys)
        if victim in keys:
            rt.cancel(victim)  # lands between the claim's read and its write
        return found

    careful: list[list[str]] = []
    real_claim = Admission._claim_in_transaction

    def claim_in_transaction(self: Admission, batch: list[Message]) -> Any:
        careful.append([m.key[0] for m in batch])
        return real_claim(self, batch)

    monkeypatch.setattr(rt.backend, "read_records", read_then_cancel)
    monkeypatch.setattr(Admission, "_claim_in_transaction", claim_in_transaction)
    worker = rt.worker()
    worker.drain()
    # Only the changed record was decided again inside a transaction: it was cancelled.
    assert careful == [[victim]]
    assert sorted(name for name, _ in RUNS) == ["n0", "n2"]
    assert rt.task(victim).status == TaskStatus.CANCELLED
    assert worker.stats["stale_message"] == 1
    for t in (tasks[0], tasks[2]):
        done = rt.task(t.task_id)
        assert done.status == TaskStatus.SUCCEEDED and done.deliveries == 1
        assert done.started_at is not None


def test_a_plain_success_commits_the_record_encoded_by_its_handler_thread(
    rt: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished: list[str] = []
    real_finish = lifecycle_tasks.finish

    def spy(env: Any, tx: Any, rec: dict[str, Any], *a: Any, **kw: Any) -> Any:
        finished.append(rec["task_id"])
        return real_finish(env, tx, rec, *a, **kw)

    monkeypatch.setattr(lifecycle_tasks, "finish", spy)
    plain = rt.enqueue_action("record", {"name": "plain"})
    ordered = rt.enqueue_action("record", {"name": "ordered"}, ordering_key="k")
    rt.worker().drain()
    # The ordered one releases its successor in the commit: the general path. A set:
    # Spanner re-runs a transaction function the emulator aborted (it aborts one of
    # two concurrent read-write transactions), so the spy may see that call twice.
    assert set(finished) == {ordered.task_id}
    for t in (plain, ordered):
        done = rt.task(t.task_id)
        assert done.status == TaskStatus.SUCCEEDED and done.error is None
        assert done.result == {"name": t.args["name"], "attempt": 1}
        assert done.finished_at == done.updated_at == clock.now()
        assert done.next_attempt_at is None and done.deliveries == 1


def test_backends_without_set_swaps_claim_inside_the_transaction(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On Spanner reading first would add a read per task and save nothing.
    monkeypatch.setattr(rt.backend, "swaps_in_sets", False)
    monkeypatch.setattr(
        rt.backend, "read_records", lambda *a: pytest.fail("read outside the transaction")
    )
    tasks = rt.transact(lambda tx: [tx.enqueue("record", {"name": f"n{i}"}) for i in range(3)])
    rt.worker().drain()
    for t in tasks:
        done = rt.task(t.task_id)
        assert done.status == TaskStatus.SUCCEEDED and done.deliveries == 1
