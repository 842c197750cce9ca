"""Driving a drain that waits on the fake clock, shared by the runtime tests."""

from __future__ import annotations

import threading

from agentq import FakeClock

__all__ = ["advance_until_done"]


def advance_until_done(clock: FakeClock, t: threading.Thread, seconds: int = 30) -> None:
    """Move fake time one second at a time (the monitor wakes each time), until
    the drain returns or ``seconds`` have passed."""
    for _ in range(seconds):
        if not t.is_alive():
            return
        try:
            clock.wait_for_sleepers(1, timeout=1.0)
        except TimeoutError:
            pass
        clock.advance(1)
    t.join(5)
