"""``rt.run_until_idle()``: run everything, moving a fake clock from timer to timer.

A notebook (or a test) on a :class:`~agentq.clock.FakeClock` wants "what happens
next, all of it": run the ready tasks, then jump the clock to the next thing that
is due (a retry's backoff, a delayed task, an escalation, an approval's expiry),
run again, and so on until nothing is due. Timers are read from the ledger: the
earliest ``next_attempt_at`` of a task still queued or waiting to retry. A
durable agent run whose next turn is ready counts as work too (the drain goes on
until it has none); a run waiting for a human's approval is idle. A task
left ``running`` once the drain is over was abandoned by a crashed worker (a
``WorkerCrash`` fault, say): its lease runs out within the backend's
``lease_seconds`` (10 s unless configured), so the clock jumps that far and
its redelivery runs. Do not run other workers on the same clock meanwhile: a
jump can outrun their lease renewals.

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
from agentq.run_info import RunStatus

if TYPE_CHECKING:
    from agentq.ledger import TaskInfo
    from agentq.run_info import RunInfo
    from agentq.runtime import Runtime

__all__ = ["IdleReport", "next_timer", "ready_turns", "run_until_idle"]

#: Most queued runs one look reads (the runtime's listing cap).
_RUNS_READ = 1000

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


def next_timer(
    tasks: list[TaskInfo], now: datetime, lease_seconds: float = LEASE_SECONDS
) -> tuple[datetime, TaskInfo] | None:
    """The earliest future ``next_attempt_at`` of a waiting task, and that task; else,
    for a task abandoned ``running``, the time its lease (``lease_seconds`` long,
    the backend's) has surely run out."""
    due = [
        (t.next_attempt_at, t) for t in tasks
        if t.status in _WAITING and t.next_attempt_at is not None and t.next_attempt_at > now
    ]  # fmt: skip
    if due:
        return min(due, key=lambda d: d[0])
    stranded = [t for t in tasks if t.status == TaskStatus.RUNNING]
    if stranded:
        return now + timedelta(seconds=lease_seconds), stranded[0]
    return None


def ready_turns(rt: Runtime, now: datetime) -> list[tuple[RunInfo, TaskInfo]]:
    """Runs whose next turn a worker could take now (queued, its turn task
    queued and due), with that task. A turn waiting out a retry is a timer
    (:func:`next_timer`); a run awaiting approval has no turn queued."""
    out = []
    for run in rt.runs(RunStatus.QUEUED, limit=_RUNS_READ):
        if run.turn_task_id is None:
            continue
        task = rt.task(run.turn_task_id)
        due = task.next_attempt_at is None or task.next_attempt_at <= now
        if task.status == TaskStatus.QUEUED and due:
            out.append((run, task))
    return out


def _drain_runs(rt: Runtime, worker: Any, now: datetime, max_steps: int) -> int:
    """Drain again while a run's turn is ready: the tasks handled. A turn this
    worker does not take (it serves other queues) raises :class:`NotIdle`."""
    handled = 0
    for _ in range(max(max_steps, 1)):
        ready = ready_turns(rt, now)
        if not ready:
            return handled
        more = worker.drain()
        if more == 0:
            run, task = ready[0]
            raise NotIdle(
                f"run {run.run_id} ({run.agent}, turn {run.turn}) waits for a worker: its turn "
                f"task {task.task_id} is ready but this worker took nothing. Does it serve "
                f"the turn's queue? (worker queues: {', '.join(worker.queues)})"
            )
        handled += more
    ready = ready_turns(rt, now)
    if ready:
        raise NotIdle(f"not idle after {max_steps} drain(s): run {ready[0][0].run_id} "
                      "keeps queuing turns with no time passing")  # fmt: skip
    return handled


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
        handled += _drain_runs(rt, worker, clock.now(), max_steps)
        found = next_timer(rt.tasks(), clock.now(), rt.backend.lease_seconds)
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
