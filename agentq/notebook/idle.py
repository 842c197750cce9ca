"""``rt.run_until_idle()``: run everything, moving a fake clock from timer to timer.

A notebook (or a test) on a :class:`~agentq.clock.FakeClock` wants "what happens
next, all of it": run the ready tasks, then jump the clock to the next thing that
is due (a retry's backoff, a delayed task, an escalation, an approval's expiry),
run again, and so on until nothing is due. Timers are read from the ledger: the
earliest ``next_attempt_at`` of a task still queued or waiting to retry. A task
left ``running`` once the drain is over was abandoned by a crashed worker (a
``WorkerCrash`` fault, say): its lease runs out within ``LEASE_SECONDS``, so the
clock jumps that far and its redelivery runs. Do not run other workers on the
same clock meanwhile: a jump can outrun their lease renewals.

It is bounded: a task that reschedules itself forever would keep it going, so
after ``max_steps`` clock jumps it raises :class:`~agentq.errors.NotIdle`, naming
what is still due; ``until`` stops the clock at a point in time instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentq.backends import LEASE_SECONDS
from agentq.clock import FakeClock
from agentq.errors import ConfigError, NotIdle
from agentq.ledger import TaskStatus

if TYPE_CHECKING:
    from agentq.ledger import TaskInfo
    from agentq.runtime import Runtime

__all__ = ["IdleReport", "next_timer", "run_until_idle"]

_WAITING = frozenset({TaskStatus.QUEUED, TaskStatus.RETRY_SCHEDULED})


@dataclass(frozen=True)
class IdleReport:
    """What :func:`run_until_idle` did: tasks handled, clock jumps, time advanced,
    and the next timer still due (only when stopped by ``until``)."""

    handled: int
    steps: int
    advanced: timedelta
    now: datetime
    next_due: datetime | None = None

    def __str__(self) -> str:
        rest = f"; next timer at {self.next_due:%Y-%m-%d %H:%M:%S}" if self.next_due else ""
        return (
            f"handled {self.handled} task(s) in {self.steps} clock jump(s), advanced "
            f"{self.advanced} to {self.now:%Y-%m-%d %H:%M:%S}{rest}"
        )


def next_timer(tasks: list[TaskInfo], now: datetime) -> tuple[datetime, TaskInfo] | None:
    """The earliest future ``next_attempt_at`` of a waiting task, and that task; else,
    for a task abandoned ``running``, the time its lease has surely run out."""
    due = [
        (t.next_attempt_at, t) for t in tasks
        if t.status in _WAITING and t.next_attempt_at is not None and t.next_attempt_at > now
    ]  # fmt: skip
    if due:
        return min(due, key=lambda d: d[0])
    stranded = [t for t in tasks if t.status == TaskStatus.RUNNING]
    if stranded:
        return now + timedelta(seconds=LEASE_SECONDS), stranded[0]
    return None


def run_until_idle(
    rt: Runtime,
    *,
    clock: FakeClock | None = None,
    until: datetime | timedelta | None = None,
    max_steps: int = 100,
    **worker_options: Any,
) -> IdleReport:
    """Drain, jump ``clock`` to the next timer, drain again… until nothing is due.

    ``clock`` must be the runtime's own :class:`~agentq.clock.FakeClock` (the
    default). ``until`` (a time, or a duration from now) is as far as the clock
    moves: timers after it stay pending. After ``max_steps`` jumps with timers still
    due it raises :class:`~agentq.errors.NotIdle`. ``worker_options`` go to
    :meth:`Runtime.worker`.
    """
    clock = clock if clock is not None else rt.clock  # type: ignore[assignment]
    if not isinstance(clock, FakeClock):
        raise ConfigError(
            "run_until_idle needs a FakeClock (Runtime(..., clock=FakeClock())); with the "
            "real clock, run a worker: rt.worker().drain() or rt.worker().start()"
        )
    if clock is not rt.clock:
        raise ConfigError("run_until_idle(clock=...) must be the clock the runtime was built with")
    if max_steps < 0:
        raise ConfigError("max_steps must be zero or more")
    start = clock.now()
    horizon = start + until if isinstance(until, timedelta) else until
    if horizon is not None and horizon.tzinfo is None:
        raise ConfigError("until must be a timezone-aware datetime or a timedelta")
    worker = rt.worker(**worker_options)
    handled = worker.drain()
    steps = 0
    while True:
        found = next_timer(rt.tasks(), clock.now())
        if found is None:
            return IdleReport(handled, steps, clock.now() - start, clock.now())
        due, task = found
        if horizon is not None and due > horizon:
            if horizon > clock.now():
                clock.set(horizon)
                handled += worker.drain()
                steps += 1
            return IdleReport(handled, steps, clock.now() - start, clock.now(), due)
        if steps >= max_steps:
            raise NotIdle(
                f"not idle after {max_steps} clock jump(s) ({clock.now() - start} of fake "
                f"time): task {task.task_id} ({task.tool}, attempt {task.attempt}) is due "
                f"at {due:%Y-%m-%d %H:%M:%S}. A task that reschedules itself forever? "
                "Pass until= to stop the clock, or a larger max_steps."
            )
        clock.set(due)
        steps += 1
        handled += worker.drain()
