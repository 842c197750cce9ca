"""The worker's long-lived receive loop (issue 10, "the receive loop as documented").

A backend that advertises ``receive_duration`` (Spanner) gets one stream per queue,
open while the worker has room: batches are read as they come, the batch that
fills the worker ends the stream (counted), messages whose lease expired before arrival
are skipped (counted), a stream that ends is re-issued, and stopping cancels the
open stream instead of waiting out a 20-minute RECEIVE. The backend here is the
real SQLite backend with a scripted ``stream``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentq import Runtime, SystemClock
from agentq.backends import Message, open_backend
from agentq.backends.base import LEASE_SECONDS, Renewal
from agentq.executor.inflight import Inflight

ROOT = Path(__file__).resolve().parents[2]


class ScriptedStream:
    """A long-lived stream: yields the scripted batches, then blocks until cancelled."""

    def __init__(self, batches: list[list[Message]]) -> None:
        self.batches = list(batches)
        self.cancelled = threading.Event()
        self.closed = threading.Event()
        self.args: tuple[int, float] | None = None

    def __iter__(self) -> Iterator[list[Message]]:
        while self.batches:
            yield self.batches.pop(0)
        self.cancelled.wait(60)

    def cancel(self) -> None:
        self.cancelled.set()

    def close(self) -> None:
        self.closed.set()


SCRIPTED_QUEUE = "payments"


class LongReceiveBackend:
    """The SQLite backend, with Spanner's long-lived receive scripted."""

    receive_duration = 1200.0

    def __init__(self, inner: Any, streams: Callable[[], ScriptedStream]) -> None:
        self._inner = inner
        self._streams = streams
        self.opened: list[ScriptedStream] = []
        self.stream_args: list[tuple[int, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def stream(self, queue: str, max_batch_size: int = 1, max_duration: float = 0.0) -> Any:
        if queue != SCRIPTED_QUEUE:  # e.g. the heartbeats' queue every worker watches
            return self._inner.stream(queue, max_batch_size, max_duration)
        self.stream_args.append((max_batch_size, max_duration))
        s = self._streams()
        self.opened.append(s)
        return _Wrapped(s)


class _Wrapped:
    def __init__(self, s: ScriptedStream) -> None:
        self._s = s
        self._it = iter(s)

    def __iter__(self) -> _Wrapped:
        return self

    def __next__(self) -> list[Message]:
        return next(self._it)

    def cancel(self) -> None:
        self._s.cancel()

    def close(self) -> None:
        self._s.close()


def _runtime(tmp_path: Path, streams: Callable[[], ScriptedStream]) -> tuple[Runtime, Any]:
    inner = open_backend(f"sqlite:///{tmp_path / 'a.db'}", clock=SystemClock())
    backend = LongReceiveBackend(inner, streams)
    rt = Runtime(backend, tools=ROOT / "tools", policies=ROOT / "policies")  # type: ignore[arg-type]
    return rt, backend


def _expired(clock: SystemClock) -> Message:
    past = clock.now() - timedelta(seconds=1)
    return Message(queue="payments", key=("t-x", 1), payload={}, deliver_time=past,
                   lease_token="tok", lease_expiry=past, last_in_batch=True)  # fmt: skip


def _run_until(worker: Any, cond: Callable[[], bool]) -> None:
    stop = threading.Event()
    runner = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    runner.start()
    try:
        for _ in range(200):
            if cond():
                break
            threading.Event().wait(0.05)
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive(), "the worker did not stop after its stream was cancelled"


@pytest.mark.slow
def test_expired_on_receipt_skipped_and_stop_cancels_the_open_stream(tmp_path: Path) -> None:
    clock = SystemClock()
    rt, backend = _runtime(tmp_path, lambda: ScriptedStream([[_expired(clock)]]))
    try:
        worker = rt.worker(queues=["payments"], concurrency=2)
        _run_until(worker, lambda: worker.stats["expired_on_receipt"] >= 1)
        assert worker.stats["expired_on_receipt"] == 1
        (stream,) = backend.opened  # one stream, held open, not one per batch
        assert stream.cancelled.is_set() and stream.closed.is_set()
        assert backend.stream_args == [(2, 1200.0)]
    finally:
        rt.close()


@pytest.mark.slow
def test_the_batch_that_fills_the_worker_ends_its_stream_and_a_free_slot_reopens_it(
    tmp_path: Path,
) -> None:
    """A stream is open only while the worker has room: the batch that fills it
    ends the stream before its claim, and the next stream opens, asking for at
    most the free slots, once a slot frees (issue 29: an open stream nobody read
    leased 76 messages within a second)."""
    clock = SystemClock()
    rt, backend = _runtime(tmp_path, lambda: ScriptedStream([[_expired(clock)], [_expired(clock)]]))
    try:
        worker = rt.worker(queues=["payments"], concurrency=1, prefetch=0)
        filled = threading.Event()
        ended_before_claim: list[bool] = []

        def dispatch(batch: list[Message], *since: float) -> None:
            if not filled.is_set():
                ended_before_claim.append(backend.opened[0].cancelled.is_set())
                filled.set()
            worker._done(len(batch))  # skipped (expired) and so finished at once

        real_fills = worker._fills

        def fill_once(n: int) -> bool:
            return True if not filled.is_set() else real_fills(n)

        worker._fills = fill_once  # type: ignore[method-assign]  # the first batch fills it
        worker._dispatch_fresh = dispatch  # type: ignore[method-assign]
        _run_until(worker, lambda: len(backend.opened) >= 2)
        assert ended_before_claim == [True]
        assert worker.stats["receive_ended_full"] >= 1
        assert len(backend.opened) >= 2  # re-issued once there was room
        assert backend.opened[0].closed.is_set()
        assert backend.stream_args[:2] == [(1, 1200.0), (1, 1200.0)]  # batches of the free slots
    finally:
        rt.close()


# -- renewal scheduled on the local clock (defect 8) ----------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = SystemClock().now()

    def monotonic(self) -> float:
        return self.mono

    def now(self) -> Any:
        return self.wall


def _inflight(lease_expiry: Any, leased_at: float | None) -> Inflight:
    return Inflight(queue="payments", key=("t", 1), token="tok", lease_expiry=lease_expiry,
                    record={"task_id": "t"}, definition=None, timeout=None,
                    leased_at=leased_at)  # fmt: skip


def test_renewal_is_due_by_local_receipt_time_not_the_servers_expiry() -> None:
    from agentq.executor.leases import LeaseMonitor

    clock = _Clock()
    # The server's clock runs 2 s ahead of ours: its expiry looks 12 s away at receipt.
    inf = _inflight(clock.wall + timedelta(seconds=LEASE_SECONDS + 2), leased_at=clock.mono)
    clock.mono += 7.6  # 7.6 s after receipt: 2.4 s of the lease left
    left = LeaseMonitor._lease_left(
        inf, clock.wall + timedelta(seconds=7.6), clock.mono, LEASE_SECONDS
    )
    assert left == pytest.approx(LEASE_SECONDS - 7.6)


def test_a_failed_renewal_does_not_mark_the_lease_lost(tmp_path: Path) -> None:
    rt, backend = _runtime(tmp_path, lambda: ScriptedStream([]))
    try:
        worker = rt.worker(queues=["payments"], concurrency=1)
        inf = _inflight(rt.clock.now(), leased_at=rt.clock.monotonic())
        calls: list[list[str]] = []

        def failing(queue: str, tokens: list[str]) -> list[Renewal]:
            calls.append(list(tokens))
            raise ConnectionError("connection reset")

        backend.renew = failing
        worker._renew("payments", [inf])
        assert not inf.lost and worker.stats["renew_errors"] == 1 and inf.token == "tok"
        backend.renew = lambda q, t: [Renewal("tok", "tok2", rt.clock.now())]
        worker._renew("payments", [inf])
        assert inf.token == "tok2" and not inf.lost and worker.stats["renewed"] == 1
    finally:
        rt.close()


# -- drain() after a commit that lands mid-round (spanner-findings F4) ------------------------


def test_drain_looks_again_when_a_commit_finished_during_its_round(tmp_path: Path) -> None:
    """On Spanner each receive is an RPC: a completion can commit (sending the next
    task) after the round passed that task's queue; drain() must not stop there."""
    rt = Runtime(f"sqlite:///{tmp_path / 'd.db'}", tools=ROOT / "tools",
                 policies=ROOT / "policies")  # fmt: skip
    try:
        worker = rt.worker(queues=["payments", "notifications"], concurrency=1)
        seen: list[str] = []

        def receive(name: str, n: int, duration: float) -> list[Message]:
            seen.append(name)
            if len(seen) == 2:  # the round's last receive: meanwhile a commit finishes
                with worker._lock:
                    worker._pending_commits += 1
                worker._finished_commit(1)
            return []

        worker._receive = receive  # type: ignore[method-assign]
        assert worker._drain_rounds(None) == 0
        assert seen == ["payments", "notifications", "payments", "notifications"]
    finally:
        rt.close()


def test_a_one_shot_receive_hands_over_every_batch_of_the_call(tmp_path: Path) -> None:
    """spanner-findings F5: drain()'s '0s' RECEIVE can carry several batches; taking
    the first and closing the call left the others leased, unseen, for 10 s."""
    clock = SystemClock()
    batches = [[_expired(clock), _expired(clock)], [_expired(clock)]]
    rt, backend = _runtime(tmp_path, lambda: ScriptedStream([]))
    try:
        worker = rt.worker(queues=["payments"], concurrency=2)
        backend.stream = lambda queue, max_batch_size=1, max_duration=0.0: iter(list(batches))
        assert len(worker._receive("payments", 2, 0.0)) == 3
        assert len(worker._receive("payments", 2, 1.0)) == 2  # a waiting receive: first batch
    finally:
        rt.close()


# -- a lease counted from its grant, not its receipt (issue 29, defect 1) ---------------------


def _leased(clock: Any, token: str, left: float) -> Message:
    return Message(queue="payments", key=("t-" + token, 1), payload={},
                   deliver_time=clock.now(), lease_token=token,
                   lease_expiry=clock.now() + timedelta(seconds=left),
                   last_in_batch=True)  # fmt: skip


def test_a_buffered_lease_counts_from_its_grant_and_a_short_one_is_renewed_or_released(
    tmp_path: Path,
) -> None:
    """Rows read 3 s and 8.5 s after the stream's first answer: the first keeps
    7 s (not 10) of lease; the second has 1.5 s, under the renewal margin, so it
    is renewed before it is claimed, or, when the renewal finds it gone, released
    unstarted and counted as stranded prefetch."""
    from agentq.executor.lease_clock import StreamLeaseClock

    clock = _Clock()
    rt, backend = _runtime(tmp_path, lambda: ScriptedStream([]))
    try:
        worker = rt.worker(queues=["payments"], concurrency=1)
        worker.clock = clock  # type: ignore[assignment]
        dispatched: list[tuple[list[Message], Any]] = []
        worker._dispatch = lambda b, received=None: dispatched.append((b, received))  # type: ignore[method-assign]
        renewals: list[list[str]] = []

        def renew(queue: str, tokens: list[str]) -> list[Renewal]:
            renewals.append(list(tokens))
            return [Renewal(t, t + "-new", clock.now() + timedelta(seconds=10)) for t in tokens]

        backend.renew = renew
        stream = iter([[_leased(clock, "a", 10)], [_leased(clock, "b", 10)]])
        lease_clock = StreamLeaseClock(clock)  # type: ignore[arg-type]
        first, since = lease_clock.read(stream)
        worker._dispatch_fresh(first, since)
        clock.mono += 3  # the second row waited in the buffer (the server's expiry
        # says 10 s left: its clock runs ahead of ours)
        second, since_b = lease_clock.read(stream)
        assert since_b == since  # buffered: granted no earlier than the first answer
        worker._dispatch_fresh(second, since_b)
        (_, _), (_, got_b) = dispatched
        assert LEASE_SECONDS - (clock.mono - got_b["b"]) == pytest.approx(7.0)
        assert renewals == []

        clock.mono += 5.5  # a third row, 8.5 s after the grant: 1.5 s left
        dispatched.clear()
        worker._dispatch_fresh([_leased(clock, "c", 1.5)], since)
        assert renewals == [["c"]]
        ((batch, got_c),) = dispatched
        assert [m.lease_token for m in batch] == ["c-new"] and got_c["c-new"] == clock.mono
        assert worker.stats["renewed_on_receipt"] == 1

        backend.renew = lambda q, t: [Renewal(x, None, clock.now()) for x in t]  # acked meanwhile
        dispatched.clear()
        worker._dispatch_fresh([_leased(clock, "d", 1.0), _leased(clock, "e", 0.0)], since)
        assert dispatched == []
        assert worker.stats["released_short_lease"] == 1
        assert worker.stats["expired_on_receipt"] == 1
        assert worker.stats["stranded_prefetch"] == 2
    finally:
        rt.close()
