"""The Spanner backend through the stand-in on the REAL clock (issue 29).

The fake clock hid defect 1: a row that waits in the stream's buffer while the
worker is full spends its 10 s lease there, unseen, and a lease counted from
receipt is renewed after it is gone. These tests run the stand-in on the
system clock (its leases last 10 s of real time, as the documents say), so
they are slow: marker ``spanner_realtime``, under 60 s in all.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from agentq import Runtime, SystemClock, ToolContext, tool

from .fixtures import EmulatorDatabase

pytestmark = pytest.mark.spanner_realtime

#: Each run of the tool: long enough that the fifth of five rows leased at once
#: waits 16 s, more than a lease, for the single handler.
WORK_SECONDS = 4.0

_runs: Counter[int] = Counter()
_runs_lock = threading.Lock()
_finished = threading.Condition(_runs_lock)


class Job(BaseModel):
    n: int


@tool(queue="slowwork", timeout=30)
def slow_job(ctx: ToolContext, args: Job) -> None:
    """Counts its runs and works for WORK_SECONDS of real time."""
    with _runs_lock:
        _runs[args.n] += 1
    # Real time is the point of the test: the work must outlast a lease's share.
    time.sleep(WORK_SECONDS)
    with _finished:
        _finished.notify_all()


@pytest.fixture
def realtime_runtime(
    emulator_database_factory: object,
) -> Iterator[Runtime]:
    db: EmulatorDatabase = emulator_database_factory(False)  # type: ignore[operator]
    # No use_clock(): the stand-in runs on the system clock, like Spanner.
    rt = Runtime(db.url, tools=[slow_job], clock=SystemClock())
    with _runs_lock:
        _runs.clear()
    try:
        yield rt
    finally:
        rt.close()


def test_buffered_rows_run_once_with_one_handler_on_the_real_clock(
    realtime_runtime: Runtime,
) -> None:
    """One handler, five rows ready at once (the stream leases them ahead of the
    handler), 4 s each: every task runs exactly once and no lease is lost."""
    rt = realtime_runtime
    ids = rt.transact(lambda tx: [tx.enqueue("slow_job", {"n": n}).task_id for n in range(5)])
    worker = rt.worker(queues=["slowwork"], concurrency=1, stats_interval=None, prune=False)
    worker.start()
    try:
        deadline = time.monotonic() + 45  # real clock: bounded wait for five 4 s runs
        with _finished:
            while worker.stats["succeeded"] < 5 and time.monotonic() < deadline:
                _finished.wait(0.5)
        # A redelivery of a lost lease would run a sixth time shortly after.
        assert worker.stats["succeeded"] == 5, dict(worker.stats)
    finally:
        worker.stop(30)
    with _runs_lock:
        runs = dict(_runs)
    assert runs == {n: 1 for n in range(5)}, (runs, dict(worker.stats))
    assert worker.stats["lease_lost"] == 0, dict(worker.stats)
    assert worker.stats["stale_completion"] == 0, dict(worker.stats)
    assert {rt.task(i).status for i in ids} == {"succeeded"}


def test_an_unacknowledged_message_comes_back_after_its_10_s_lease_on_the_real_clock(
    emulator_database_factory: object,
) -> None:
    """The documents' lease (10 s, on Spanner's clock) and redelivery with back-off:
    another worker gets nothing while the lease lasts, then the message again."""
    from agentq import open_backend
    from agentq.spec import QueueSpec

    db: EmulatorDatabase = emulator_database_factory(False)  # type: ignore[operator]
    first, second = (open_backend(db.url, clock=SystemClock()) for _ in range(2))
    try:
        first.create_queue(QueueSpec.simple("Lapse"))
        second.create_queue(QueueSpec.simple("Lapse"))
        first.transact(lambda tx: tx.send("Lapse", "m1", b"x"))
        [[_leased]] = list(first.stream("Lapse", 1, 0))
        started = time.monotonic()
        seen: list[float] = []
        while not seen and time.monotonic() - started < 40:  # real clock: bounded
            if [m for b in second.stream("Lapse", 1, 0) for m in b]:
                seen.append(time.monotonic() - started)
        assert seen and seen[0] >= 9.5, (seen, db.env.interposer.choices(db.database_id).describe())
        assert db.env.interposer.lease_expirations(db.database_id, "Lapse") == 1
    finally:
        first.close()
        second.close()
