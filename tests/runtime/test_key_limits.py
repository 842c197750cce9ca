"""Per-key concurrency limits (``concurrency_key`` + ``max_in_flight``), on a real
worker and a fake clock: at most N tasks per key value run at once, and a slot is
freed by every way a task leaves ``running``: success, failure, timeout, cancel,
and (one lease later) the death of its worker. Across worker processes:
test_key_limit_processes.py."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Policy, Runtime, ToolContext, tool
from agentq.errors import ConfigError
from agentq.faults import WorkerCrash
from agentq.keylimits import SLOT_SECONDS
from agentq.policies import load_policies

WAIT = 20.0  # real seconds any test waits for a thread, at most


class Refund(BaseModel):
    merchant_id: str
    n: int


class Probe:
    """What the handler does per task ``n``, and who ran at the same time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.entered: list[int] = []
        self.gate = threading.Event()
        self.behaviour: dict[int, Callable[[ToolContext], None]] = {}

    def run(self, ctx: ToolContext, args: Refund) -> None:
        with self.lock:
            self.now[args.merchant_id] += 1
            self.most[args.merchant_id] = max(self.most[args.merchant_id],
                                              self.now[args.merchant_id])  # fmt: skip
            self.entered.append(args.n)
        try:
            self.behaviour.get(args.n, lambda ctx: None)(ctx)
        finally:
            with self.lock:
                self.now[args.merchant_id] -= 1

    def block(self, ctx: ToolContext) -> None:
        assert self.gate.wait(WAIT), "the test never opened the gate"

    def wait_entered(self, count: int) -> None:
        deadline = time.monotonic() + WAIT
        while len(self.entered) < count:
            assert time.monotonic() < deadline, f"only {self.entered} entered"
            time.sleep(0.005)


PROBE = Probe()


@tool(queue="refunds")
def limited_refund(ctx: ToolContext, args: Refund) -> None:
    PROBE.run(ctx, args)


def policy(max_in_flight: int, **extra: Any) -> Policy:
    return Policy.model_validate({"tools": {"limited_refund": {
        "concurrency_key": "merchant_id", "max_in_flight": max_in_flight, **extra}}})  # fmt: skip


@pytest.fixture
def probe() -> Iterator[Probe]:
    global PROBE
    PROBE = Probe()
    yield PROBE
    PROBE.gate.set()


def runtime(
    clock: FakeClock, max_in_flight: int, db: str = "sqlite:///:memory:", **extra: Any
) -> Runtime:
    return Runtime(db, tools=[limited_refund], policies=policy(max_in_flight, **extra),
                   clock=clock)  # fmt: skip


def enqueue(rt: Runtime, merchant: str, n: int) -> str:
    return rt.enqueue_action("limited_refund", {"merchant_id": merchant, "n": n}).task_id


def in_thread(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_at_most_max_in_flight_per_key_run_at_once(clock: FakeClock, probe: Probe) -> None:
    rt = runtime(clock, 2)
    ids = [enqueue(rt, "m-1", n) for n in range(5)] + [enqueue(rt, "m-2", n) for n in (5, 6)]
    for n in range(7):
        probe.behaviour[n] = probe.block
    worker = rt.worker(concurrency=8)
    t = in_thread(worker.drain)
    probe.wait_entered(4)  # two of m-1, both of m-2
    with probe.lock:
        assert probe.now == {"m-1": 2, "m-2": 2}
    probe.gate.set()
    t.join(WAIT)
    assert not t.is_alive()
    assert [rt.task(i).status for i in ids] == ["succeeded"] * 7
    assert probe.most == {"m-1": 2, "m-2": 2}
    assert worker.stats["key_limited"] >= 3  # m-1's others waited, not failed
    assert all(rt.task(i).failures == 0 for i in ids)
    rt.close()


def test_the_limit_holds_for_arguments_stored_out_of_band(clock: FakeClock, probe: Probe) -> None:
    # args_inline_bytes=0: every task's arguments are in a payload row, none in
    # its record; the slot's key must still be the merchant, not a shared value.
    rt = Runtime("sqlite:///:memory:", tools=[limited_refund], policies=policy(1),
                 clock=clock, args_inline_bytes=0)  # fmt: skip
    ids = [enqueue(rt, "m-1", 0), enqueue(rt, "m-2", 1), enqueue(rt, "m-1", 2)]
    for n in range(3):
        probe.behaviour[n] = probe.block
    t = in_thread(rt.worker(concurrency=4).drain)
    probe.wait_entered(2)
    with probe.lock:
        assert probe.now == {"m-1": 1, "m-2": 1}
    probe.gate.set()
    t.join(WAIT)
    assert not t.is_alive()
    assert [rt.task(i).status for i in ids] == ["succeeded"] * 3
    assert probe.most == {"m-1": 1, "m-2": 1}
    rt.close()


def test_a_failure_frees_the_slot_for_a_waiting_task_at_once(
    backend_url: str, clock: FakeClock, probe: Probe
) -> None:
    rt = runtime(clock, 1, backend_url)  # on every backend: SQLite and the Spanner emulator
    first = enqueue(rt, "m-1", 0)
    second = enqueue(rt, "m-1", 1)

    failed: list[int] = []

    def fail_once(ctx: ToolContext) -> None:
        if not failed:
            failed.append(1)
            raise RuntimeError("payments API down")

    probe.behaviour[0] = probe.behaviour[1] = fail_once  # whichever a backend delivers first
    rt.worker(concurrency=4).drain()  # no time passes: the waiter is sent by the failure
    statuses = sorted([rt.task(first).status, rt.task(second).status])
    if isinstance(clock, FakeClock):
        assert statuses == ["retry_scheduled", "succeeded"]
    else:
        # Live mode, Spanner's real time: on a slow run the failed task's retry
        # came due during the drain and ran too (seen in CI under load).
        assert statuses in (["retry_scheduled", "succeeded"], ["succeeded", "succeeded"])
    assert probe.most == {"m-1": 1}
    rt.close()


def test_cancelling_a_running_task_frees_its_slot(clock: FakeClock, probe: Probe) -> None:
    rt = runtime(clock, 1)
    first = enqueue(rt, "m-1", 0)
    second = enqueue(rt, "m-1", 1)
    probe.behaviour[0] = probe.block
    t = in_thread(rt.worker(concurrency=4).drain)
    probe.wait_entered(1)
    rt.cancel(first, by="test")
    probe.wait_entered(2)  # the waiting task was sent by the cancel
    probe.gate.set()
    t.join(WAIT)
    assert rt.task(first).status == "cancelled"
    assert rt.task(second).status == "succeeded"
    rt.close()


def test_a_timed_out_task_frees_its_slot(clock: FakeClock, probe: Probe) -> None:
    rt = runtime(clock, 1, timeout="5s")
    first = enqueue(rt, "m-1", 0)
    second = enqueue(rt, "m-1", 1)

    def hang_once(ctx: ToolContext) -> None:
        if ctx.attempt == 1:
            ctx.clock.sleep(3600)

    probe.behaviour[0] = hang_once
    t = in_thread(rt.worker(concurrency=4, monitor_interval=0.5).drain)
    probe.wait_entered(1)
    clock.advance(6)  # past the timeout: the monitor gives the call up
    probe.wait_entered(2)  # the waiting task was sent by the timeout's failure
    t.join(WAIT)
    assert probe.entered == [0, 1]  # the first one's retry is not due yet
    assert rt.task(second).status == "succeeded"
    timed_out = rt.task(first)
    assert timed_out.status == "retry_scheduled" and "TimeoutError" in (timed_out.error or "")
    clock.advance(3600)  # lets the abandoned handler thread return
    rt.worker().drain()
    assert rt.task(first).status == "succeeded"
    rt.close()


def test_a_dead_workers_slot_frees_itself_one_lease_later(
    backend_url: str, clock: FakeClock, probe: Probe
) -> None:
    rt = runtime(clock, 1, backend_url)
    first = enqueue(rt, "m-1", 0)
    second = enqueue(rt, "m-1", 1)
    crashed: list[int] = []

    def die_once(ctx: ToolContext) -> None:
        if not crashed:
            crashed.append(1)
            raise WorkerCrash("killed")  # nothing committed, lease and slot not extended

    probe.behaviour[0] = probe.behaviour[1] = die_once  # whichever a backend delivers first
    rt.worker(concurrency=4).drain()
    statuses = sorted([rt.task(first).status, rt.task(second).status])
    assert statuses == ["queued", "running"]  # the dead worker's task holds the slot
    waiting = first if rt.task(first).status == "queued" else second
    clock.advance(SLOT_SECONDS / 2)
    rt.worker(concurrency=4).drain()
    assert rt.task(waiting).status == "queued"  # the slot is still held
    for _ in range(10):
        clock.advance(SLOT_SECONDS)
        rt.worker(concurrency=4).drain()
    assert rt.task(second).status == "succeeded"
    assert rt.task(first).status == "succeeded"  # redelivered after its lease expired
    assert probe.most == {"m-1": 1}
    rt.close()


def test_a_long_task_keeps_its_slot_while_its_lease_is_renewed(
    clock: FakeClock, probe: Probe
) -> None:
    rt = runtime(clock, 1)
    first = enqueue(rt, "m-1", 0)
    second = enqueue(rt, "m-1", 1)
    steps = threading.Event()

    def long_work(ctx: ToolContext) -> None:
        for _ in range(int(SLOT_SECONDS * 4)):
            ctx.clock.sleep(1)
        steps.set()

    probe.behaviour[0] = long_work
    worker = rt.worker(concurrency=4, monitor_interval=1.0)
    t = in_thread(worker.drain)
    probe.wait_entered(1)
    deadline = time.monotonic() + WAIT
    while not steps.is_set():
        assert time.monotonic() < deadline
        if clock.sleepers < 2:  # the handler and the lease monitor
            time.sleep(0.0005)
            continue
        clock.advance(1)
        assert probe.entered == [0], "the waiting task ran while the slot was held"
    t.join(WAIT)
    assert rt.task(first).status == "succeeded" and rt.task(first).deliveries == 1
    assert probe.most == {"m-1": 1}
    for _ in range(3):
        clock.advance(SLOT_SECONDS)
        rt.worker().drain()
    assert rt.task(second).status == "succeeded"
    rt.close()


def test_tasks_without_a_limit_are_not_held(clock: FakeClock, probe: Probe) -> None:
    rt = Runtime("sqlite:///:memory:", tools=[limited_refund], clock=clock)
    for n in range(3):
        enqueue(rt, "m-1", n)
        probe.behaviour[n] = probe.block
    t = in_thread(rt.worker(concurrency=4).drain)
    probe.wait_entered(3)
    probe.gate.set()
    t.join(WAIT)
    assert probe.most == {"m-1": 3}
    rt.close()


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ("max_in_flight = 2", "max_in_flight needs concurrency_key"),
        ('concurrency_key = "merchant_id"', "needs max_in_flight"),
        ('concurrency_key = "merchant_id"\nmax_in_flight = 0', "from 1 to 1000"),
        ('concurrency_key = "merchant_id"\nmax_in_flight = 5000', "from 1 to 1000"),
        ('concurrency_key = "merchant_id"\nmax_in_flight = "2"', "max_in_flight"),
        ('concurrency_key = "merchant_id"\nmax_in_flight = true', "max_in_flight"),
        ('concurrency_key = "merchant.id"\nmax_in_flight = 2', "top-level argument"),
        ("concurrency_key = 7\nmax_in_flight = 2", "concurrency_key"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_file_and_the_key(
    tmp_path: Any, settings: str, problem: str
) -> None:
    file = tmp_path / "limits.toml"
    file.write_text(f"[tools.limited_refund]\n{settings}\n")
    with pytest.raises(ConfigError, match=r"limits\.toml") as info:
        load_policies(tmp_path)
    assert problem in str(info.value)
