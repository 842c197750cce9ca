"""Dedupe keys (the dirty-flag pattern, issue 13 item 10): a burst of the same call
while its task is pending collapses into that task; once it started, the next call
makes a new task, so the latest change is never missed."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentq import FakeClock, InvalidArguments, Runtime, TaskStatus, ToolContext, tool
from tests.runtime._drive import stop_on_the_fake_clock

ROOT = Path(__file__).resolve().parents[2]
RUNS: list[int] = []
STARTED = threading.Event()
GATE = threading.Event()


class Profile(BaseModel):
    user_id: int


@tool(queue="index")
def reindex(ctx: ToolContext, args: Profile) -> None:
    RUNS.append(args.user_id)


@tool(queue="slow_index")
def slow_reindex(ctx: ToolContext, args: Profile) -> None:
    STARTED.set()
    GATE.wait(30)
    RUNS.append(args.user_id)


@pytest.fixture
def drt(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    RUNS.clear()
    STARTED.clear()
    GATE.clear()
    runtime = Runtime(
        f"sqlite:///{tmp_path / 'agentq.db'}", tools=[reindex, slow_reindex], clock=clock
    )
    yield runtime
    runtime.close()


def test_a_burst_while_pending_collapses_into_one_task(drt: Runtime) -> None:
    first = drt.submit("reindex", {"user_id": 7}, dedupe_key="user:7")
    later = [drt.submit("reindex", {"user_id": 7}, dedupe_key="user:7") for _ in range(5)]
    assert first.created and not first.collapsed
    assert all(s.collapsed and not s.created for s in later)
    assert {s.task.task_id for s in later} == {first.task.task_id}
    drt.worker().drain()
    assert RUNS == [7]


def test_other_keys_and_other_arguments_are_never_collapsed(drt: Runtime) -> None:
    a = drt.submit("reindex", {"user_id": 7}, dedupe_key="user:7")
    b = drt.submit("reindex", {"user_id": 8}, dedupe_key="user:8")
    # The same key with other arguments is another call: it is not dropped.
    c = drt.submit("reindex", {"user_id": 9}, dedupe_key="user:7")
    no_key = drt.submit("reindex", {"user_id": 7})
    assert len({a.task.task_id, b.task.task_id, c.task.task_id, no_key.task.task_id}) == 4
    assert not any(s.collapsed for s in (a, b, c, no_key))
    drt.worker().drain()
    assert sorted(RUNS) == [7, 7, 8, 9]


def test_once_the_task_started_a_new_call_makes_a_new_task(drt: Runtime, clock: FakeClock) -> None:
    first = drt.submit("slow_reindex", {"user_id": 1}, dedupe_key="u1")
    worker = drt.worker(queues=["slow_index"]).start()
    try:
        assert STARTED.wait(30)
        # The running handler may have read the profile before this change:
        # collapsing into it would miss the change.
        # (Due in a minute, so the worker does not claim it before the third call.)
        second = drt.submit("slow_reindex", {"user_id": 1}, dedupe_key="u1", delay=60)
        assert second.created and not second.collapsed
        assert second.task.task_id != first.task.task_id
        third = drt.submit("slow_reindex", {"user_id": 1}, dedupe_key="u1", delay=60)
        assert third.collapsed and third.task.task_id == second.task.task_id
        GATE.set()
        drt.wait(first.task.task_id, timeout=30)
    finally:
        GATE.set()
        stop_on_the_fake_clock(worker, clock, most=10)  # the second call is due at 60 s
    assert RUNS == [1]
    assert drt.task(second.task.task_id).status is TaskStatus.QUEUED  # due in a minute


def test_a_finished_task_is_not_collapsed_into(drt: Runtime) -> None:
    first = drt.submit("reindex", {"user_id": 3}, dedupe_key="u3")
    drt.worker().drain()
    again = drt.submit("reindex", {"user_id": 3}, dedupe_key="u3")
    assert again.created and again.task.task_id != first.task.task_id


def test_a_pending_task_scheduled_later_than_the_call_is_not_collapsed_into(
    drt: Runtime,
) -> None:
    drt.submit("reindex", {"user_id": 4}, dedupe_key="u4", delay=60)
    now = drt.submit("reindex", {"user_id": 4}, dedupe_key="u4")
    assert now.created, "collapsing would delay this call's work by a minute"
    sooner = drt.submit("reindex", {"user_id": 4}, dedupe_key="u4", delay=120)
    assert sooner.collapsed and sooner.task.task_id == now.task.task_id


def test_debounce_delays_the_first_call_and_collapses_the_burst(
    drt: Runtime, clock: FakeClock
) -> None:
    first = drt.submit("reindex", {"user_id": 5}, dedupe_key="u5", debounce="5s")
    clock.advance(3)
    second = drt.submit("reindex", {"user_id": 5}, dedupe_key="u5", debounce=5)
    assert second.collapsed
    assert drt.worker().drain() == 0  # not due yet: 5 s after the first call
    clock.advance(2)
    drt.worker().drain()
    assert RUNS == [5]
    assert drt.task(first.task.task_id).status is TaskStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("kw", "problem"),
    [
        ({"debounce": 5}, "needs a dedupe_key"),
        ({"dedupe_key": "k", "debounce": 5, "delay": 1}, "not both"),
        ({"dedupe_key": "k", "debounce": -1}, "debounce must be"),
        ({"dedupe_key": "k", "debounce": float("nan")}, "debounce must be"),
        ({"dedupe_key": ""}, "dedupe_key must be"),
    ],
)
def test_bad_dedupe_options_are_refused(drt: Runtime, kw: dict, problem: str) -> None:
    with pytest.raises(InvalidArguments, match=problem):
        drt.submit("reindex", {"user_id": 1}, **kw)


def test_an_idempotency_key_of_a_collapsed_call_returns_the_task_it_collapsed_into(
    drt: Runtime,
) -> None:
    first = drt.submit("reindex", {"user_id": 6}, dedupe_key="u6")
    collapsed = drt.submit("reindex", {"user_id": 6}, dedupe_key="u6", idempotency_key="call-2")
    assert collapsed.collapsed
    drt.worker().drain()
    # A retry of that call (same idempotency key) after the task ran is still
    # that call: it does not make a new task.
    retry = drt.submit("reindex", {"user_id": 6}, dedupe_key="u6", idempotency_key="call-2")
    assert not retry.created and retry.task.task_id == first.task.task_id
    assert RUNS == [6]


def test_ordering_keys_collapse_only_into_the_last_task_of_the_key(drt: Runtime) -> None:
    a = drt.submit("reindex", {"user_id": 1}, dedupe_key="u1", ordering_key="acct")
    b = drt.submit("reindex", {"user_id": 2}, ordering_key="acct")
    # Collapsing into a (before b) would run this call's work before b's.
    c = drt.submit("reindex", {"user_id": 1}, dedupe_key="u1", ordering_key="acct")
    assert c.created
    d = drt.submit("reindex", {"user_id": 1}, dedupe_key="u1", ordering_key="acct")
    assert d.collapsed and d.task.task_id == c.task.task_id
    drt.worker().drain()
    assert RUNS == [1, 2, 1]  # a, b, then c (with d's call in it)
    assert a.task.task_id != c.task.task_id != b.task.task_id
    # Another ordering key is another call.
    pending = drt.submit("reindex", {"user_id": 1}, dedupe_key="u1", ordering_key="acct")
    other = drt.submit("reindex", {"user_id": 1}, dedupe_key="u1", ordering_key="other")
    assert pending.created and other.created


def test_concurrent_threads_make_one_task(drt: Runtime, tmp_path: Path) -> None:
    results: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def burst() -> None:
        rt = Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=[reindex], clock=drt.clock)
        try:
            start.wait(30)
            for _ in range(10):
                s = rt.submit("reindex", {"user_id": 42}, dedupe_key="u42")
                with lock:
                    results.append(s.task.task_id)
        finally:
            rt.close()

    threads = [threading.Thread(target=burst) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 80 and len(set(results)) == 1


_PRODUCER = """
import sys
from pydantic import BaseModel
from agentq import Runtime, ToolContext, tool

class Profile(BaseModel):
    user_id: int

@tool(queue="index")
def reindex(ctx: ToolContext, args: Profile) -> None: ...

rt = Runtime(sys.argv[1], tools=[reindex])
ids = {rt.submit("reindex", {"user_id": 42}, dedupe_key="u42").task.task_id for _ in range(25)}
print(" ".join(sorted(ids)))
rt.close()
"""


@pytest.mark.slow
def test_concurrent_processes_make_one_task(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agentq.db'}"
    Runtime(url, tools=[reindex]).close()  # the schema, before the race
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PRODUCER, url], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    ids = {i for out in outputs for i in out.split()}
    assert len(ids) == 1


def test_a_deferred_first_delivery_is_still_pending(drt: Runtime, clock: FakeClock) -> None:
    """A task whose first delivery was deferred (its handler never ran) still
    collapses: it will read the state when it does run."""
    first = drt.submit("reindex", {"user_id": 9}, dedupe_key="u9")
    # Park it as a rate limit would: its record says queued, attempt 2, later.
    from agentq.lifecycle import tasks as lifecycle

    def defer(tx):  # type: ignore[no-untyped-def]
        rec = lifecycle.read(tx.tx, first.task.task_id)
        lifecycle.defer(drt, tx.tx, rec, tx.now + timedelta(seconds=1), deliveries=1,
                        ack_key=(rec["task_id"], rec["attempt"]))  # fmt: skip

    drt.transact(defer)
    assert drt.task(first.task.task_id).status is TaskStatus.QUEUED
    again = drt.submit("reindex", {"user_id": 9}, dedupe_key="u9", delay=5)
    assert again.collapsed and again.task.task_id == first.task.task_id
