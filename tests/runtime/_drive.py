"""Driving a drain that waits on the fake clock, shared by the runtime tests.

Fake time moves only in acknowledged steps, and only while the test still needs
it to. A step waits first for the worker's lease monitor to sleep on the clock
again, back from its last check (renewals and timeouts included), so the worker
has handled one step before the next; other sleepers (handlers waiting for a
rate-limit turn) do not count, since they wake for good. Time stops moving as soon as
what needed it has happened: the rest of a drain (receiving, running, committing)
takes real time on Spanner's RPCs, and fake seconds spent racing those RPCs
expire the stand-in's leases under tasks that are still running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agentq import FakeClock
from agentq.executor import Worker

__all__ = ["advance_until", "advance_until_done", "stop_on_the_fake_clock"]

#: Real seconds a driven test may take before it is a failure, not a hang.
REAL_TIMEOUT = 60.0
#: The thread that renews leases and gives up overrunning calls (agentq.executor).
MONITOR = "agentq-monitor"


def advance_until(
    clock: FakeClock,
    done: Callable[[], bool],
    *,
    step: float = 1.0,
    what: str = "the condition",
    ack: str = MONITOR,
    settled: Callable[[], bool] = lambda: True,
    real_timeout: float = REAL_TIMEOUT,
) -> None:
    """Move fake time ``step`` seconds at a time until ``done()`` holds, each step
    once the thread named ``ack`` sleeps on the clock again and ``settled()`` says
    the rest of the worker has handled the last step; fail after ``real_timeout``
    real seconds."""
    stop = threading.Event()
    timer = threading.Timer(real_timeout, stop.set)
    timer.daemon = True
    timer.start()
    try:
        while not done():
            if stop.is_set():
                raise AssertionError(f"{what} did not happen within {real_timeout:.0f} s")
            if not clock.sleeping(ack) or not settled():
                stop.wait(0.0005)  # the worker is busy with the last step, in real time
                continue
            if not done():
                clock.advance(step)
    finally:
        timer.cancel()


def advance_until_done(clock: FakeClock, t: threading.Thread, seconds: int = 30) -> None:
    """Move fake time one acknowledged second at a time until the drain in ``t``
    returns or ``seconds`` of fake time have passed, then wait for it in real time."""
    start = clock.monotonic()
    advance_until(
        clock,
        lambda: not t.is_alive() or clock.monotonic() - start >= seconds,
        what="the drain's return",
    )
    t.join(REAL_TIMEOUT)


def stop_on_the_fake_clock(
    worker: Worker, clock: FakeClock, *, most: float = 60.0, timeout: float = REAL_TIMEOUT
) -> None:
    """:meth:`Worker.stop` for a worker started on the fake clock. The stop ends
    its receivers' waits itself (tests/runtime/test_worker_stop.py); anything
    else that waits on the fake clock while the worker stops ends only when fake
    time moves. Time moves a second every few real milliseconds until the worker
    stopped, ``most`` fake seconds in all (keep it short of anything the test
    still expects not to be due); what stopped it early, if anything did, is
    raised as ``stop`` raises it."""
    failure: list[BaseException] = []

    def stop() -> None:
        try:
            worker.stop(timeout)
        except BaseException as exc:  # raised below, in the test's thread
            failure.append(exc)

    stopper = threading.Thread(target=stop, name="agentq-test-stop", daemon=True)
    stopper.start()
    moved = 0.0
    while stopper.is_alive():
        if moved < most:
            clock.advance(1.0)
            moved += 1.0
        stopper.join(0.005)
    if failure:
        raise failure[0]
