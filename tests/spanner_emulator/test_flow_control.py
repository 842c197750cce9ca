"""A worker's RECEIVE leases no further ahead of its free handler slots than one
batch (issue 29, defect 1: an unread stream leased 76 messages within 1 s, then
stranded them for a lease plus the redelivery backoff when it was cancelled as
"full").

The stand-in leases batch after batch for as long as a RECEIVE stays open and
messages are ready, as nothing in the documents says Spanner would not; the
worker must therefore keep no RECEIVE open while it cannot take what comes. The
queues run on the test's fake clock, which is never moved here: a lease taken
stays taken, so the stand-in's count of leased messages is every message any
RECEIVE of the test leased.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool

from .fixtures import EmulatorDatabase

READY = 40

_release = threading.Event()
_started = threading.Semaphore(0)


class Item(BaseModel):
    n: int


@tool(queue="heldwork", timeout=60)
def held_item(ctx: ToolContext, args: Item) -> None:
    """Holds its handler until the test releases it."""
    _started.release()
    _release.wait(60)


def _wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` in real time (the worker's threads run in real time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        threading.Event().wait(0.02)
    return condition()


@pytest.fixture
def held_runtime(
    emulator_database_factory: Callable[[bool], EmulatorDatabase],
) -> Iterator[tuple[Runtime, EmulatorDatabase]]:
    db = emulator_database_factory(False)
    clock = FakeClock()
    db.use_clock(clock)
    _release.clear()
    rt = Runtime(db.url, tools=[held_item], clock=clock)
    try:
        yield rt, db
    finally:
        _release.set()
        rt.close()


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_full_worker_holds_no_receive_open_and_leases_at_most_a_batch_ahead(
    held_runtime: tuple[Runtime, EmulatorDatabase], concurrency: int
) -> None:
    rt, db = held_runtime
    interposer = db.env.interposer
    rt.transact(lambda tx: [tx.enqueue("held_item", {"n": n}) for n in range(READY)])
    worker = rt.worker(
        queues=["heldwork"], concurrency=concurrency, prefetch=0, stats_interval=None, prune=False
    )
    worker.start()
    try:
        for _ in range(concurrency):  # every handler busy: the worker is full
            assert _started.acquire(timeout=30), dict(worker.stats)
        # No RECEIVE stays open while the worker cannot take what it would bring.
        closed = _wait_for(lambda: interposer.open_receives(db.database_id, "heldwork") == 0, 10)
        leased = interposer.leased(db.database_id, "heldwork")
        # The running tasks, and what the server leased in the moment between the
        # batch that filled the worker and the cancel reaching it: a batch or two
        # of at most `concurrency` (seen: 1 to 2 for one handler, 3 for three).
        # Before, the open stream leased every ready message (40).
        assert closed and leased <= 3 * concurrency + 2, (closed, leased, dict(worker.stats))
        assert worker.stats["receive_ended_full"] >= 1, dict(worker.stats)
    finally:
        _release.set()
        worker.stop(30)
    while _started.acquire(blocking=False):
        pass
