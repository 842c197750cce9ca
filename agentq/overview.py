"""What ``agentq inspect`` shows besides the queues: per tool, how many tasks are
queued, running, retrying, awaiting approval and dead, and how old the oldest
unfinished one is; the open approvals; the workers' heartbeats.

Read outside any transaction (a snapshot that may be a moment old, never a
lock), and never from the finished tasks (issue 38 item 1): the unfinished and
rare tasks are those in the index of rare statuses (waiting, awaiting approval,
a retry scheduled, an outcome unknown, dead, cancelled: read through it) and
those a task queue holds a message for or an ordering key holds back (queued,
running); the finished ones are counted by the backend's totals
(:meth:`~agentq.backends.Backend.record_count`, kept on insert and delete),
less the others. Of the queued and running ones, those whose messages no
worker has leased are counted without their records being read (queued, each
of them: by their messages' keys, or in the database by :func:`backlog`), and
only the others' records are read by key. What is read grows with the work
the workers hold and the rare and held tasks, not with a backlog's records or
the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentq.backends import Backend, BacklogGroup
from agentq.backends.base import COMMON_TASK_STATUSES, OPEN_APPROVAL_STATUSES, RecordFilter
from agentq.backends.owners import OWNER_FIELD
from agentq.envelope import TASK_KEY
from agentq.ledger import Tables
from agentq.statuses import TaskStatus

__all__ = [
    "LIVE_SECONDS",
    "ToolCounts",
    "WorkerInfo",
    "backlog",
    "dead_letter_count",
    "finished_counts",
    "open_approvals",
    "open_task_ids",
    "status_counts",
    "task_queues",
    "tool_counts",
    "unfinished_tasks",
    "workers",
]

_PAGE = 1000
#: A worker whose last heartbeat is older than this is not counted as live.
LIVE_SECONDS = 30.0
_COUNTED = {
    "queued": "queued",
    "running": "running",
    "retry_scheduled": "retrying",
    "awaiting_approval": "awaiting_approval",
    "dead": "dead",
    "waiting": "waiting",
    "outcome_unknown": "outcome_unknown",
}
_UNFINISHED = (
    "queued", "running", "retry_scheduled", "awaiting_approval", "waiting", "outcome_unknown"
)


@dataclass
class ToolCounts:
    """One tool's tasks by status, and the age (s) of its oldest unfinished one.

    ``waiting``: tasks waiting on others (``after=``); ``outcome_unknown``: guarded
    calls parked for an operator (``agentq resolve``)."""

    tool: str
    queued: int = 0
    running: int = 0
    retrying: int = 0
    awaiting_approval: int = 0
    dead: int = 0
    waiting: int = 0
    outcome_unknown: int = 0
    oldest_unfinished_s: float | None = None
    oldest_approval_s: float | None = None


#: The tasks' statuses the index of rare statuses holds ("failed": a ledger
#: written before ``retry_scheduled`` had its name).
RARE_TASK_STATUSES = sorted(
    {s.value for s in TaskStatus if s.value not in COMMON_TASK_STATUSES} | {"failed"}
)
_OPEN = ("queued", "running")
_IN_CHUNK = 500


def _scan(backend: Backend, table: str, where: RecordFilter | None = None) -> Any:
    after = ""
    while True:
        rows = backend.list_records(table, limit=_PAGE, after=after, where=where)
        yield from rows
        if len(rows) < _PAGE:
            return
        after = rows[-1][0]


def _age(now: datetime, stamp: Any) -> float | None:
    try:
        return max(0.0, (now - datetime.fromisoformat(str(stamp))).total_seconds())
    except (TypeError, ValueError):
        return None


def open_task_ids(
    backend: Backend, queues: list[str] | None = None, *, running: bool = False
) -> set[str]:
    """The tasks that may be queued or running: those a task queue (keyed as
    the runtime keys them) holds a message for, and those held behind their
    ordering key, which have none until the tasks before them finish (the
    keys' records: one per key with unfinished tasks, :mod:`agentq.ordering`).
    ``queues``: the task queues, if the caller has them (:func:`task_queues`).
    With ``running``, only those that may be running: their message was
    delivered (a held task's was not; :meth:`~agentq.backends.Backend.message_keys`)."""
    # The keys' records first: a held task sent meanwhile then has its message.
    ids = set() if running else _held_ids(backend)
    for name in task_queues(backend) if queues is None else queues:
        ids.update(str(k[0]) for k in backend.message_keys(name, delivered=running))
    return ids


def _held_ids(backend: Backend) -> set[str]:
    """The tasks held behind their ordering keys (no message yet)."""
    return {str(task_id) for _, held in _scan(backend, Tables.ORDERING)
            for task_id in held.get("pending") or ()}  # fmt: skip


def task_queues(backend: Backend) -> list[str]:
    """The queues keyed as the runtime keys its tasks' messages (task id, attempt)."""
    return [
        name for name in backend.queues()
        if tuple((c.name, c.type.value) for c in backend.queue_spec(name).key) == TASK_KEY
    ]  # fmt: skip


def unfinished_tasks(backend: Backend, owner: str | None = None) -> dict[str, dict[str, Any]]:
    """The records of the tasks in a rare status (through its index) and of the
    queued and running ones (the tasks a queue holds a message for or an
    ordering key holds back, read by key), by task id: every task that is not
    succeeded, and no succeeded one. With ``owner``, only the tasks it created
    (its rare ones through the index of owners and rare statuses:
    :mod:`agentq.backends.owners`). Reads every queued record: the counts
    read :func:`backlog` instead."""
    out = _rare(backend, owner)
    out.update(_open_records(backend, sorted(open_task_ids(backend) - out.keys()), owner))
    return out


def _rare(backend: Backend, owner: str | None) -> dict[str, dict[str, Any]]:
    where: dict[str, list[str | None]] = {"status": list(RARE_TASK_STATUSES)}
    if owner is not None:
        where[OWNER_FIELD] = [owner]
    return dict(_scan(backend, Tables.TASKS, where))


def backlog(
    backend: Backend, owner: str | None = None, *, oldest: bool = True
) -> tuple[dict[str, dict[str, Any]], list[BacklogGroup]]:
    """The unfinished tasks (``owner``'s, if given) as :func:`unfinished_tasks`
    finds them, without reading the backlog: the records of the rare tasks, of
    those whose messages were leased and of those held behind their ordering
    keys, and the tasks whose messages no worker has leased, counted by tool
    in the database (:meth:`~agentq.backends.Backend.undelivered_backlog`:
    queued, each of them; with ``oldest``, the oldest's creation time too).
    What is read grows with the tasks the workers hold, the rare ones and the
    held ones, not with a backlog.

    A snapshot taken in steps, never a lock: the held tasks and the groups are
    read before the leased messages, so a task sent or leased meanwhile may be
    counted twice for a moment, never left out."""
    records = _rare(backend, owner)
    queues = task_queues(backend)
    held = _held_ids(backend)
    groups = [g for name in queues
              for g in backend.undelivered_backlog(name, owner=owner, oldest=oldest)]  # fmt: skip
    leased = open_task_ids(backend, queues, running=True)
    records.update(_open_records(backend, sorted((held | leased) - records.keys()), owner))
    return records, groups


def _open_records(backend: Backend, wanted: list[str], owner: str | None) -> dict[str, Any]:
    """The records of ``wanted`` that are queued or running (and ``owner``'s)."""
    out: dict[str, Any] = {}
    for first in range(0, len(wanted), _IN_CHUNK):
        found = backend.read_records(Tables.TASKS, wanted[first : first + _IN_CHUNK])
        out.update((k, r.value) for k, r in found.items() if r.value.get("status") in _OPEN
                   and (owner is None or r.value.get(OWNER_FIELD) == owner))  # fmt: skip
    return out


def status_counts(backend: Backend, owner: str | None = None) -> dict[str, int]:
    """How many tasks are in each status (those with none left out): the
    unfinished and rare ones counted from their records, the others (succeeded)
    as the ledger's total less those. With ``owner``, only the tasks it
    created (``created_by``), their total the backend's count of the owner's
    (:meth:`~agentq.backends.Backend.record_count`): what is read grows with the
    unfinished work the workers hold and the rare tasks, not with a backlog or
    the finished tasks.

    A queued task whose message no worker has leased yet is counted without
    its record being read: such a task is queued (it is running only once a
    worker claimed it, after leasing its message; it succeeds only from
    running, and its completion removes the message), unless its status is
    rare, and the rare ones are read. Without ``owner``, by its message's key
    (:meth:`~agentq.backends.Backend.message_keys` with ``delivered``); with
    one, by the database's count of the owner's (:func:`backlog`)."""
    if owner is not None:
        tasks, groups = backlog(backend, owner, oldest=False)
        return _counted(tasks.values(), backend.record_count(Tables.TASKS, owner=owner),
                        sum(g.count for g in groups))  # fmt: skip
    rare = _rare(backend, None)
    queues = task_queues(backend)
    delivered = open_task_ids(backend, queues, running=True) - rare.keys()
    undelivered = open_task_ids(backend, queues) - rare.keys() - delivered
    read = _open_records(backend, sorted(delivered), None)
    return _counted([*rare.values(), *read.values()], backend.record_count(Tables.TASKS),
                    len(undelivered))  # fmt: skip


def _counted(tasks: Any, total: int, queued: int) -> dict[str, int]:
    """Counts by status of the records ``tasks`` and of ``queued`` tasks more;
    the rest of ``total`` succeeded."""
    counts: dict[str, int] = {"queued": queued} if queued else {}
    seen = queued
    for rec in tasks:
        status = str(rec.get("status"))
        counts[status] = counts.get(status, 0) + 1
        seen += 1
    if total - seen > 0:
        counts["succeeded"] = counts.get("succeeded", 0) + total - seen
    return dict(sorted(counts.items()))


def tool_counts(backend: Backend, now: datetime) -> list[ToolCounts]:
    """Per-tool counts of the unfinished and rare tasks, sorted by tool name
    (from :func:`backlog`: a backlog's tasks counted in the database)."""
    out: dict[str, ToolCounts] = {}
    records, groups = backlog(backend)
    for rec in records.values():
        status = str(rec.get("status"))
        column = _COUNTED.get(status)
        if column is None:
            continue
        counts = out.setdefault(str(rec.get("tool")), ToolCounts(str(rec.get("tool"))))
        setattr(counts, column, getattr(counts, column) + 1)
        if status in _UNFINISHED:
            _older(counts, _age(now, rec.get("created_at")), status == "awaiting_approval")
    for group in groups:
        counts = out.setdefault(str(group.tool), ToolCounts(str(group.tool)))
        counts.queued += group.count
        _older(counts, _age(now, group.oldest_created_at), False)
    return [out[name] for name in sorted(out)]


def _older(counts: ToolCounts, age: float | None, approval: bool) -> None:
    """Keep ``age`` as the oldest unfinished (and approval's) if it is older."""
    if age is not None:
        counts.oldest_unfinished_s = max(counts.oldest_unfinished_s or 0.0, age)
        if approval:
            counts.oldest_approval_s = max(counts.oldest_approval_s or 0.0, age)


def finished_counts(backend: Backend) -> dict[str, int]:
    """How many tasks there are in each status :func:`tool_counts` leaves out
    (finished: succeeded, cancelled), for a listing that is empty to say what exists."""
    return {s: n for s, n in status_counts(backend).items() if s not in _COUNTED}


def open_approvals(backend: Backend, now: datetime) -> dict[str, Any]:
    """Undecided approvals: how many are pending and escalated, the oldest's age."""
    counts = {"pending": 0, "escalated": 0}
    oldest: float | None = None
    for _, rec in _scan(backend, Tables.APPROVALS, {"status": list(OPEN_APPROVAL_STATUSES)}):
        status = rec.get("status")
        if status in counts:
            counts[str(status)] += 1
            age = _age(now, rec.get("requested_at"))
            if age is not None:
                oldest = max(oldest or 0.0, age)
    return {**counts, "oldest_s": oldest}


def dead_letter_count(backend: Backend) -> int:
    """Entries in the dead-letter queue (strays included)."""
    return backend.record_count(Tables.DEAD_LETTERS)


@dataclass
class WorkerInfo:
    """A worker as its last heartbeat described it. ``status``: ``live`` (heard
    from within ``live_within``), ``lost`` (its heartbeat timed out and was
    reported: it stopped without a clean shutdown) or ``silent`` (neither, yet)."""

    worker_id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: str
    heartbeat_at: str
    in_flight: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    age_s: float | None = None
    live: bool = False
    status: str = "silent"
    lost_at: str | None = None
    timeout_s: float | None = None


def workers(backend: Backend, now: datetime, live_within: float = LIVE_SECONDS) -> list[WorkerInfo]:
    """Workers that published a heartbeat, newest first, with ``live`` set for
    those heard from within ``live_within`` seconds and not reported lost."""
    out = []
    computed = {"age_s", "live", "status"}
    for _, rec in _scan(backend, Tables.WORKERS):
        try:
            info = WorkerInfo(**{k: rec[k] for k in WorkerInfo.__dataclass_fields__
                                 if k in rec and k not in computed})  # fmt: skip
        except TypeError:
            continue  # not a heartbeat this version wrote
        info.age_s = _age(now, info.heartbeat_at)
        lost = rec.get("status") == "lost"
        info.live = not lost and info.age_s is not None and info.age_s <= live_within
        info.status = "lost" if lost else "live" if info.live else "silent"
        out.append(info)
    return sorted(out, key=lambda w: (w.age_s is None, w.age_s or 0.0))
