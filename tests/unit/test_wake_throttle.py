"""The PostgreSQL listener's throttle of wake-ups (issue 38: enqueue -> start).

A notification that comes after a quiet interval must wake the receivers at
once: with a 50 ms interval, a trickle of tasks 20 ms apart waited about 24 ms
each for the next allowed wake-up (the median enqueue -> start latency of
``agentq bench`` on PostgreSQL). A flood is still one wake-up per interval.
"""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends.postgres.wakeups import WakeThrottle


def test_a_trickle_of_notifications_20_ms_apart_wakes_at_once_each_time() -> None:
    throttle = WakeThrottle()
    for i in range(10):
        now = 100.0 + i * 0.020
        assert throttle.wait(now) == 0.0, i
        assert throttle.take(now), i


def test_a_burst_within_the_interval_is_one_wake_up_at_its_end() -> None:
    throttle = WakeThrottle(0.005)
    assert throttle.take(10.0)
    assert not throttle.take(10.001) and not throttle.take(10.004)
    assert abs(throttle.wait(10.001) - 0.004) < 1e-9
    assert throttle.take(10.005)


def test_a_flood_is_bounded_by_the_interval() -> None:
    throttle = WakeThrottle()
    woken = sum(throttle.take(i * 0.0001) for i in range(30_000))  # 3 s, 10,000/s
    assert woken <= 3.0 / throttle.interval + 1
