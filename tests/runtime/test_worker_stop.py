"""A stopping worker ends its receivers' waits at once.

Each receiver waits up to ``receive_timeout`` for work between leases. On SQLite
and PostgreSQL that wait was not woken by the stop: every stop sat out the rest
of it (up to a second of real time with the default), and on a fake clock it
ended only when fake time moved, or when the join's real-time bound ran out
(``receive_timeout + 5`` s, one queue after another). The stop now cancels a
waiting receive, as it cancels Spanner's long-lived streams (whose receivers
wait in the RECEIVE call, not on the clock)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentq import FakeClock, Runtime


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 'agentq.db'}"


def test_a_stop_ends_the_receivers_waits_without_time_moving(url: str) -> None:
    clock = FakeClock()
    with Runtime(url, clock=clock) as rt:
        worker = rt.worker(receive_timeout=60, stats_interval=None, prune=False)
        worker.start()
        receivers = len(worker.queues)
        deadline = time.monotonic() + 30  # real time, bounded: until each receiver waits
        while clock.sleeping("agentq-recv") < receivers:
            assert time.monotonic() < deadline, f"{clock.sleeping('agentq-recv')} receiver(s) wait"
            time.sleep(0.005)
        started = time.monotonic()
        worker.stop(timeout=30)  # fake time never moves: only the stop can end the waits
        took = time.monotonic() - started
        assert clock.sleeping("agentq-recv") == 0
        assert took < 10, f"the stop took {took:.1f} s"  # was 30 s (the stop's bound)
