"""How much a worker leases at once: one whole batch fits beside busy handlers.

A worker leases while fewer tasks than its capacity (handlers + prefetch) are
outstanding. With prefetch defaulting to ``concurrency``, a ``batch_size`` above
``concurrency`` was never leased whole: ``concurrency=16, batch_size=50`` leased
at most 32, so the worker ran more, smaller lease, claim and commit
transactions than it was configured for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool


class Nothing(BaseModel):
    n: int = 0


@tool(queue="prefetch_q")
def nothing(ctx: ToolContext, args: Nothing) -> None:
    return None


def _first_lease_size(tmp_path: Path, **worker_options: Any) -> int:
    rt = Runtime(f"sqlite:///{tmp_path / 'prefetch.db'}", tools=[nothing], clock=FakeClock())
    try:
        rt.transact(lambda tx: [tx.enqueue("nothing", {"n": i}) for i in range(40)])
        sizes: list[int] = []
        stream = rt.backend.stream

        def recording(queue: str, *, max_batch_size: int, max_duration: float) -> Any:
            sizes.append(max_batch_size)
            return stream(queue, max_batch_size=max_batch_size, max_duration=max_duration)

        rt.backend.stream = recording  # type: ignore[method-assign]
        rt.worker(queues=["prefetch_q"], **worker_options).drain(max_rounds=1)
        assert sizes, "the worker leased nothing"
        return sizes[0]
    finally:
        rt.close()


def test_a_batch_larger_than_the_handlers_is_leased_whole(tmp_path: Path) -> None:
    # Before: capacity 2 + 2, so the first lease asked for 4 of the batch of 10.
    assert _first_lease_size(tmp_path, concurrency=2, batch_size=10) == 10


def test_an_explicit_prefetch_still_caps_the_lease(tmp_path: Path) -> None:
    assert _first_lease_size(tmp_path, concurrency=2, batch_size=10, prefetch=0) == 2
    assert _first_lease_size(tmp_path, concurrency=2, batch_size=10, prefetch=3) == 5


def test_without_a_batch_size_the_prefetch_is_the_handler_count(tmp_path: Path) -> None:
    # batch_size defaults to concurrency: a lease of 3 with 3 more in reserve.
    rt = Runtime(f"sqlite:///{tmp_path / 'prefetch.db'}", tools=[nothing], clock=FakeClock())
    try:
        assert rt.worker(queues=["prefetch_q"], concurrency=3).capacity == 6
    finally:
        rt.close()


def test_a_negative_prefetch_is_refused(tmp_path: Path) -> None:
    rt = Runtime(f"sqlite:///{tmp_path / 'prefetch.db'}", tools=[nothing], clock=FakeClock())
    try:
        with pytest.raises(ValueError, match="prefetch"):
            rt.worker(queues=["prefetch_q"], prefetch=-1)
    finally:
        rt.close()



# -- a one-shot receive (drain) leases what fits, not the whole queue ---------------


@tool(queue="oneshot_q")
def once(ctx: ToolContext, args: Nothing) -> None:
    return None


@pytest.mark.parametrize("backend_url", ["sqlite", "postgresql"], indirect=True)
def test_a_one_shot_receive_leases_no_more_than_it_asked_for(
    backend_url: str, clock: FakeClock
) -> None:
    # Before: drain() read its one-shot stream to the end, and on SQLite and
    # PostgreSQL such a stream leases batch after batch until nothing is ready:
    # asked for 2, the first receive leased and claimed all 30 tasks (shown
    # running while 2 ran, held by this worker until their leases expired had it
    # died). On Spanner one RECEIVE call may carry several batches, which must all
    # be read (agentq.executor.receiving), so it is not run there.
    rt = Runtime(backend_url, tools=[once], clock=clock)
    try:
        rt.transact(lambda tx: [tx.enqueue("once", {"n": i}) for i in range(30)])
        asked_and_leased: list[list[int]] = []
        stream = rt.backend.stream

        def recording(queue: str, *, max_batch_size: int, **options: Any) -> Any:
            counts = [max_batch_size, 0]
            asked_and_leased.append(counts)
            for batch in stream(queue, max_batch_size=max_batch_size, **options):
                counts[1] += len(batch)
                yield batch

        rt.backend.stream = recording  # type: ignore[method-assign]
        worker = rt.worker(queues=["oneshot_q"], concurrency=2, batch_size=2)
        assert worker.drain() == 30
        assert sum(leased for _, leased in asked_and_leased) == 30
        assert all(leased <= asked for asked, leased in asked_and_leased), asked_and_leased
        assert len(rt.tasks("succeeded", tool="once")) == 30
    finally:
        rt.close()
