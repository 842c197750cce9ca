"""The shared rate limiter on the fake clock: GCRA turns kept in the database, so
two limiters (two workers) on one database share one budget (issue 9, defect 6)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from agentq import FakeClock, Policy
from agentq.backends import Backend, open_backend
from agentq.clock import to_micros
from agentq.ratelimit import (
    MAX_WAIT,
    RATE_LIMITS,
    RESERVE_AHEAD,
    RateLimiter,
    RateLimitWait,
    gcra,
    reserved_turn,
)
from agentq.ratelimit import _Limit as Limit


@pytest.fixture
def backend(clock: FakeClock) -> Iterator[Backend]:
    b = open_backend("sqlite:///:memory:", clock=clock)
    yield b
    b.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def limiter(
    backend: Backend, clock: FakeClock, rate: float, burst: int | None = None
) -> RateLimiter:
    tool: dict[str, Any] = {"rate_limit_per_second": rate}
    if burst is not None:
        tool["rate_limit_burst"] = burst
    return RateLimiter(backend, clock, Policy.model_validate({"tools": {"t": tool}}))


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``condition`` until it holds, up to ``timeout`` seconds of the monotonic
    clock (real under libfaketime, unlike the wall clock): bounded by time, not by
    a count of short waits, and failing loudly instead of going on regardless."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        threading.Event().wait(0.001)


def seconds_after(clock: FakeClock, start: Any, turns: list[Any]) -> list[float]:
    return [(t - start).total_seconds() for t in turns]


@pytest.mark.parametrize(("rate", "interval"), [(0.1, 10.0), (0.5, 2.0)])
def test_slow_rates_give_one_turn_per_interval(
    backend: Backend, clock: FakeClock, rate: float, interval: float
) -> None:
    lim = limiter(backend, clock, rate)
    start = clock.now()
    turns = [lim.take("t") for _ in range(4)]
    assert all(reserved for _, reserved in turns)
    assert seconds_after(clock, start, [t for t, _ in turns]) == [i * interval for i in range(4)]
    # Time passing does not refill beyond the burst of one: the next turn is the
    # next free one, not four at once.
    clock.advance(100 * interval)
    later = clock.now()
    assert seconds_after(clock, later, [lim.take("t")[0] for _ in range(2)]) == [0.0, interval]


def test_admit_runs_now_or_raises_for_a_turn_beyond_the_wait_bound(
    backend: Backend, clock: FakeClock
) -> None:
    lim = limiter(backend, clock, 0.1)
    record = {"task_id": "a", "attempt": 1}
    lim.admit("t", record)  # the first turn is now: no wait, no sleep
    with pytest.raises(RateLimitWait) as info:
        lim.admit("t", {"task_id": "b", "attempt": 3})
    assert info.value.at == clock.now() + timedelta(seconds=10)
    assert info.value.reserved
    # The executor keeps the reserved turn for the rescheduled attempt...
    rescheduled: dict[str, Any] = {"task_id": "b", "attempt": 3}
    info.value.keep_turn(rescheduled)
    rescheduled["attempt"] = 4
    assert reserved_turn(rescheduled) == info.value.at
    # ... which then runs on it without taking another.
    clock.advance(10)
    before = lim.reservations
    lim.admit("t", rescheduled)
    assert lim.reservations == before
    with pytest.raises(RateLimitWait) as third:
        lim.admit("t", {"task_id": "c", "attempt": 1})
    assert third.value.at == clock.now() + timedelta(seconds=10)  # not the one b holds


def test_a_turn_reserved_for_another_attempt_is_not_used(clock: FakeClock) -> None:
    record = {"attempt": 5, "rate_turn": {"attempt": 4, "at": to_micros(clock.now())}}
    assert reserved_turn(record) is None


def test_short_waits_sleep_on_the_injected_clock(backend: Backend) -> None:
    clock = FakeClock(auto_advance=True)
    lim = limiter(backend, clock, 2)  # burst 2: two at once, then one every 0.5 s
    for i in range(4):
        lim.admit("t", {"attempt": i})
    assert clock.slept == pytest.approx(1.0)


def test_a_burst_of_1000_per_second(backend: Backend) -> None:
    clock = FakeClock(auto_advance=True)
    lim = limiter(backend, clock, 1000)
    start = clock.now()
    for i in range(1000):
        lim.admit("t", {"attempt": i})
    assert clock.now() == start and clock.slept == 0  # the whole burst at once
    lim.admit("t", {"attempt": 1000})
    assert clock.slept == pytest.approx(0.001)  # then one per millisecond
    clock.advance(0.5)
    start = clock.now()
    for i in range(500):
        lim.admit("t", {"attempt": i})  # half a second refilled half the burst
    assert clock.now() == start
    lim.admit("t", {"attempt": 0})
    assert clock.now() == start + timedelta(milliseconds=1)


def test_two_limiters_on_one_database_share_the_budget(backend: Backend, clock: FakeClock) -> None:
    """Two workers: the second does not get a burst of its own."""
    one, two = limiter(backend, clock, 5), limiter(backend, clock, 5)
    start = clock.now()
    got = [one.take("t")[0] for _ in range(3)] + [two.take("t")[0] for _ in range(4)]
    assert seconds_after(clock, start, got) == [0, 0, 0, 0, 0, 0.2, 0.4]
    record = backend.get_record(RATE_LIMITS, "t")
    assert record is not None and record["tat"] == to_micros(start) + 7 * 200_000


def test_concurrent_callers_share_one_reservation(backend: Backend, clock: FakeClock) -> None:
    """Handler threads waiting together are served by one transaction (a lease on a
    budget sized by demand), and each gets its own turn."""
    lim = limiter(backend, clock, 1000)
    entered = threading.Event()
    release = threading.Event()
    real = backend.transact

    def slow_transact(fn: Any, **kw: Any) -> Any:
        entered.set()
        release.wait(5)
        return real(fn, **kw)

    backend.transact = slow_transact  # type: ignore[method-assign]
    turns: list[Any] = []
    lock = threading.Lock()

    def take() -> None:
        t, _ = lim.take("t")
        with lock:
            turns.append(t)

    first = threading.Thread(target=take)
    first.start()
    entered.wait(5)
    others = [threading.Thread(target=take) for _ in range(7)]
    for t in others:
        t.start()
    # The first is served (in its transaction); wait until all seven queue behind it.
    wait_until(lambda: lim._locals["t"].waiting == 7)
    release.set()
    for t in [first, *others]:
        t.join(5)
    assert not any(t.is_alive() for t in [first, *others])
    assert len(turns) == 8
    assert lim.reservations == 2  # the first took one; the seven came in one batch
    record = backend.get_record(RATE_LIMITS, "t")
    assert record is not None and record["tat"] == to_micros(clock.now()) + 8 * 1000


class _HeldRelease:
    """A lock that, released by ``holder``, keeps that thread from going on until
    ``go`` is set: the window between a served caller letting go of the fetch
    lock and returning, which the scheduler opens only now and then."""

    def __init__(self, real: Any, go: threading.Event, arrived: threading.Event) -> None:
        self.real, self.go, self.arrived = real, go, arrived
        self.holder: threading.Thread | None = None

    def __enter__(self) -> None:
        if self.holder is not None and threading.current_thread() is not self.holder:
            self.arrived.set()  # queued behind the holder
        self.real.acquire()

    def __exit__(self, *exc: object) -> None:
        self.real.release()
        if threading.current_thread() is self.holder:
            assert self.go.wait(5)


def test_a_served_caller_is_not_counted_in_the_next_reservation(
    backend: Backend, clock: FakeClock
) -> None:
    """Two callers, one after the other: two turns, not three. A caller used to be
    counted as waiting until after it let go of the fetch lock, so the caller
    behind it reserved a turn for it too, a turn no task ever used."""
    lim = limiter(backend, clock, 1000)
    local = lim._local("t")
    in_tx, release, arrived, done = (threading.Event() for _ in range(4))
    held = _HeldRelease(local.fetch, done, arrived)
    local.fetch = held  # type: ignore[assignment]
    real = backend.transact

    def slow_transact(fn: Any, **kw: Any) -> Any:
        if threading.current_thread() is held.holder:
            in_tx.set()
            assert release.wait(5)
        return real(fn, **kw)

    backend.transact = slow_transact  # type: ignore[method-assign]
    turns: list[Any] = []

    def take() -> None:
        turns.append(lim.take("t")[0])

    first, second = threading.Thread(target=take), threading.Thread(target=take)
    held.holder = first
    first.start()
    assert in_tx.wait(5)
    second.start()
    assert arrived.wait(5)  # the second waits for the fetch lock the first holds

    def take_second_then_let_first_go() -> None:
        second.join(5)
        done.set()

    releaser = threading.Thread(target=take_second_then_let_first_go)
    releaser.start()
    release.set()
    for t in (first, second, releaser):
        t.join(5)
    assert not any(t.is_alive() for t in (first, second, releaser))
    start = clock.now()
    assert turns == [start, start]  # within the burst (1000 at this rate)
    record = backend.get_record(RATE_LIMITS, "t")
    assert record is not None and record["tat"] == to_micros(start) + 2 * 1000  # not 3
    assert lim.reservations == 2


def test_turns_are_reserved_only_within_the_horizon(backend: Backend, clock: FakeClock) -> None:
    lim = limiter(backend, clock, 1)
    start = clock.now()
    for _ in range(int(RESERVE_AHEAD) + 1):
        _, reserved = lim.take("t")
        assert reserved
    at, reserved = lim.take("t")  # the next turn is more than an hour ahead
    assert not reserved
    assert at == start + timedelta(seconds=1)  # ask again when it comes within the hour
    with pytest.raises(RateLimitWait) as info:
        lim.admit("t", {"attempt": 2})
    assert not info.value.reserved
    record: dict[str, Any] = {"attempt": 2, "rate_turn": {"attempt": 3, "at": 0}}
    info.value.keep_turn(record)
    assert "rate_turn" not in record


def test_gcra_pulls_back_a_tat_left_far_ahead() -> None:
    """A tat beyond any reservation (clock went back, policy changed) must not freeze
    the tool: it is pulled back to the horizon."""
    limit = Limit.of(10, 1)
    now = 10**15
    far = now + 10**12  # eleven days ahead
    bound = now + limit.horizon + limit.interval  # the furthest a reservation leaves it
    assert gcra(far, now, limit, 1) == (bound, [])  # nothing within the hour yet
    # Stored back, it comes within reach one interval later.
    later = now + limit.interval
    assert gcra(bound, later, limit, 1) == (bound + limit.interval, [later + limit.horizon])


def test_a_tat_left_far_ahead_in_the_database_thaws(backend: Backend, clock: FakeClock) -> None:
    lim = limiter(backend, clock, 10)
    far = to_micros(clock.now() + timedelta(days=3650))
    backend.transact(lambda tx: tx.put_record(RATE_LIMITS, "t", {"tat": far}))
    at, reserved = lim.take("t")
    assert not reserved and at == clock.now() + timedelta(seconds=0.1)
    clock.set(at)
    at, reserved = lim.take("t")
    assert reserved and at == clock.now() + timedelta(seconds=RESERVE_AHEAD)


def test_gcra_gives_the_burst_then_one_per_interval() -> None:
    limit = Limit.of(4, 3)  # 250 ms apart, bursts of 3
    tat, turns = gcra(0, 1_000_000, limit, 5)
    assert turns == [1_000_000, 1_000_000, 1_000_000, 1_250_000, 1_500_000]
    assert tat == 1_000_000 + 5 * 250_000


def test_unlimited_tools_are_admitted_without_a_transaction(
    backend: Backend, clock: FakeClock
) -> None:
    lim = limiter(backend, clock, 1)
    lim.admit("other", {"attempt": 1})
    assert lim.reservations == 0
    assert MAX_WAIT == 1.0


@pytest.mark.parametrize("stored", [{"tat": "soon"}, {}, {"tat": True}, {"tat": 1.5}])
def test_a_rate_record_agentq_did_not_write_counts_as_idle(
    backend: Backend, clock: FakeClock, stored: dict[str, Any]
) -> None:
    backend.transact(lambda tx: tx.put_record(RATE_LIMITS, "t", stored))
    lim = limiter(backend, clock, 1)
    assert lim.take("t") == (clock.now(), True)
    assert lim.take("t") == (clock.now() + timedelta(seconds=1), True)
