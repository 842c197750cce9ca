"""A worker on a backend with short leases (``lease_seconds``): its default
renewal schedule follows the lease, so a long task keeps its lease and is not
redelivered; a worker's explicit ``renew_margin``/``monitor_interval`` still win."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agentq import FakeClock, Runtime, WorkerCrash
from agentq.backends import LEASE_SECONDS
from agentq.demo_server import DemoAPI
from agentq.executor.leases import MONITOR_INTERVAL, RENEW_MARGIN, renewal_schedule
from tests.runtime.conftest import ROOT, settings_for


def test_the_default_schedule_is_unchanged_for_ten_second_leases() -> None:
    assert renewal_schedule(LEASE_SECONDS) == (RENEW_MARGIN, MONITOR_INTERVAL) == (2.5, 0.5)
    assert renewal_schedule(60) == (2.5, 0.5)


@pytest.mark.parametrize("lease", [1.0, 2.0, 3.0, 5.0])
def test_a_short_lease_is_renewed_with_half_of_it_left_checked_five_times(lease: float) -> None:
    margin, tick = renewal_schedule(lease)
    assert margin == min(2.5, lease / 2)
    assert tick == pytest.approx(min(0.5, margin / 5))
    # Due while at least half the lease is left, and seen due within one tick.
    assert margin - tick >= lease / 2 - 0.5 and margin - tick > 0.3 * lease


@pytest.fixture
def short_rt(
    backend_url: str, clock: FakeClock, api: DemoAPI, request: pytest.FixtureRequest
) -> Iterator[Runtime]:
    if backend_url.startswith("spanner"):
        pytest.skip("Spanner's leases are fixed at 10 s")
    url = backend_url + ("&" if "?" in backend_url else "?") + "lease_seconds=2"
    runtime = Runtime(url, tools=ROOT / "tools", policies=ROOT / "policies", clock=clock,
                      settings=settings_for(api))  # fmt: skip
    yield runtime
    runtime.close()


def test_a_long_task_keeps_its_two_second_lease(
    short_rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    rt = short_rt
    assert rt.backend.lease_seconds == 2.0
    task = rt.enqueue_action("execute_refund", {"order_id": "o1", "amount": 40})
    release, entered = threading.Event(), threading.Event()

    def hold(info: dict[str, object]) -> bool:
        entered.set()
        release.wait(30)
        return False

    rt.faults.arm("after_external_call", WorkerCrash(), when=hold)
    worker = rt.worker()
    assert (worker.renew_margin, worker.monitor_interval) == (1.0, pytest.approx(0.2))
    t = threading.Thread(target=worker.drain)
    t.start()
    try:
        assert entered.wait(10)
        for _ in range(50):  # 10 s of fake time, five lease lengths, one tick at a time
            clock.wait_for_sleepers(1)  # the monitor is idle again
            clock.advance(0.2)
            assert rt.backend.stats("payments").ready == 0
        assert rt.worker().drain() == 0  # nothing to redeliver: the lease never lapsed
    finally:
        release.set()
        t.join(10)
    assert worker.stats["renewed"] >= 8  # about one a second
    assert worker.stats["lease_lost"] == 0
    assert worker.stats["succeeded"] == 1
    assert rt.task(task.task_id).deliveries == 1
    assert api.charges_per_key() == {task.task_id: 1}


def test_an_explicit_schedule_is_kept_on_a_short_lease(short_rt: Runtime) -> None:
    worker = short_rt.worker(renew_margin=0.7, monitor_interval=0.1)
    assert (worker.renew_margin, worker.monitor_interval) == (0.7, 0.1)
