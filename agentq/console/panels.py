"""What the console's newer panels show: a task's run time and attempt timeline,
its approval's timers, the workers and the queues nobody serves, the schedules.

Plain functions over a :class:`~agentq.runtime.Runtime` (or records it
returned) that give plain data, like :mod:`~agentq.console.views`; text that
came from a task (errors) is redacted here, and escaped by the templates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2 import Environment

from agentq import overview
from agentq.approvals import ApprovalInfo
from agentq.console import views
from agentq.console.timefmt import moment, seconds_between
from agentq.errors import TaskNotFound
from agentq.ledger import Tables, TaskInfo, TaskStatus
from agentq.lifecycle.heartbeats import HEARTBEAT_QUEUE
from agentq.lifecycle.tasks import approval_timer_ids
from agentq.overview import WorkerInfo
from agentq.redact import redact_text
from agentq.runtime import Runtime
from agentq.server import access
from agentq.server.auth import Principal

__all__ = [
    "Attempt",
    "approval_timers",
    "attempt_timeline",
    "install",
    "live_panels",
    "record_visible_to",
    "run_time",
    "short_id",
    "task_extras",
    "unserved",
]

#: Most workers the overview lists (the freshest heartbeats first).
WORKERS_SHOWN = 50

#: What each way an attempt ended reads as on the timeline.
OUTCOMES = {
    "succeeded": "succeeded",
    "retry": "failed, retried",
    "throttle": "throttled",
    "fail": "failed for good",
    "dead_letter": "dead-lettered",
    "park": "outcome unknown",
    "checkpoint": "checkpointed",
    "cancel": "cancelled",
    "lost": "worker lost (lease ran out)",
    "running": "running",
}


def short_id(task_id: str, tail: int = 12) -> str:
    """A long id shown by its kind and its tail (the part that differs between
    tasks of one transaction: their heads are the same creation time)."""
    head, sep, rest = task_id.partition("_")
    if not sep or len(rest) <= tail + 2:
        return task_id
    return f"{head}_…{rest[-tail:]}"


def run_time(task: TaskInfo, now: datetime) -> float | None:
    """Seconds its last attempt ran: to its end, or to ``now`` while it runs;
    None when no attempt ran, or the last one's end is not the task's."""
    if task.started_at is None:
        return None
    if task.finished_at is not None:
        return seconds_between(task.started_at, task.finished_at)
    if task.status is TaskStatus.RUNNING:
        return seconds_between(task.started_at, now)
    return None


@dataclass(frozen=True)
class Attempt:
    """One attempt on a task's timeline (``ended`` None: lost, or still running)."""

    attempt: int
    delivery: int | None
    started: datetime | None
    ended: datetime | None
    outcome: str
    error: str | None

    @property
    def label(self) -> str:
        """How it ended, in words."""
        return OUTCOMES.get(self.outcome, self.outcome)

    @property
    def seconds(self) -> float | None:
        """How long it ran, if it ended."""
        return seconds_between(self.started, self.ended)


def attempt_timeline(task: TaskInfo, record: Mapping[str, Any]) -> list[Attempt]:
    """Every attempt of ``task`` the record kept, oldest first: those that ended
    without success (the record's ``attempts``), then the current one if it
    runs or succeeded."""
    out = []
    for raw in record.get("attempts") or ():
        if not isinstance(raw, Mapping):
            continue
        error = raw.get("error")
        out.append(Attempt(
            attempt=_int(raw.get("attempt")), delivery=_int(raw.get("delivery")) or None,
            started=moment(raw.get("started_at")), ended=moment(raw.get("ended_at")),
            outcome=str(raw.get("outcome") or "?"),
            error=redact_text(str(error)) if error else None,
        ))  # fmt: skip
    if task.status in (TaskStatus.RUNNING, TaskStatus.SUCCEEDED) and task.started_at:
        out.append(Attempt(
            attempt=task.attempt, delivery=task.deliveries or None, started=task.started_at,
            ended=task.finished_at, outcome=task.status.value, error=None,
        ))  # fmt: skip
    return out


def approval_timers(rt: Runtime, approval: ApprovalInfo) -> list[TaskInfo]:
    """The timer and notification tasks of ``approval`` (expiry, deadline,
    escalation, reminders, its notice), those the ledger still has."""
    record = rt.backend.get_record(Tables.APPROVALS, approval.approval_id) or {}
    out = []
    for task_id in approval_timer_ids(record):
        try:
            out.append(rt.task(task_id))
        except TaskNotFound:
            continue  # pruned
    return out


def task_extras(rt: Runtime, task: TaskInfo, principal: Principal) -> dict[str, Any]:
    """What the task page shows besides :func:`views.task_detail`: the attempt
    timeline, its approval's timers (to those who may see the runtime's own
    tasks), the task a timer belongs to, and whether it can be replayed."""
    record = rt.backend.get_record(Tables.TASKS, task.task_id) or {}
    approval = rt.approval(task.approval_id) if task.approval_id else None
    sees_timers = access.sees_all(principal)
    in_dlq = rt.backend.get_record(Tables.DEAD_LETTERS, task.task_id) is not None
    return {
        "timeline": attempt_timeline(task, record),
        "timers": approval_timers(rt, approval) if approval and sees_timers else [],
        "timer_of": approval.task_id if approval and access.is_internal(task) else None,
        "replayable": task.status is TaskStatus.DEAD and in_dlq,
    }


def unserved(queues: list[dict[str, Any]], workers: list[WorkerInfo]) -> list[dict[str, Any]]:
    """The queues (rows of :func:`views.queue_figures`) where work is ready and no
    live worker serves it, each with the command that would serve it."""
    live = [w for w in workers if w.live]
    served = {q for w in live for q in w.queues}
    out = []
    for row in queues:
        if row["ready"] > 0 and row["queue"] != HEARTBEAT_QUEUE and row["queue"] not in served:
            command = f"agentq worker --queue {row['queue']}" if live else "agentq worker"
            out.append({**row, "command": command})
    return out


def record_visible_to(principal: Principal) -> Callable[[Mapping[str, Any]], bool]:
    """Whether ``principal`` may see a raw task record (:mod:`agentq.server.access`'s
    rule, without building the task): everyone's for operate/admin, else its own."""
    if access.sees_all(principal):
        return lambda rec: True
    return lambda rec: rec.get("created_by", "local") == principal.name


def chart_owner(principal: Principal) -> str | None:
    """Whose finished tasks ``principal``'s chart counts: everyone's (None) for
    operate/admin, else its own (the owner its tasks are created with)."""
    return None if access.sees_all(principal) else principal.name


def live_panels(rt: Runtime, principal: Principal, now: datetime) -> dict[str, Any]:
    """The overview's live figures: the queues, those waiting for a worker, and
    the workers (their ids, hosts and queues only to ``operate``/``admin``;
    others see how many are live)."""
    queues = views.queue_figures(rt)
    workers = overview.workers(rt.backend, now)
    return {
        "queues": queues,
        "unserved": unserved(queues, workers),
        "workers": workers[:WORKERS_SHOWN] if access.sees_all(principal) else None,
        "live_count": sum(w.live for w in workers),
    }


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def install(env: Environment) -> None:
    """Add the globals the templates use from here and :mod:`views`."""
    env.globals.update(
        run_time=run_time, short_id=short_id, pretty_args=views.pretty, redact=redact_text
    )
