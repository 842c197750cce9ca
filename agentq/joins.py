"""Joins: which waiting tasks each task's completion decides.

A task enqueued with ``after=[a, b]`` runs once ``a`` and ``b`` have both
succeeded ("waiting for several events" in Spanner's queue patterns). The
decision is taken in the prerequisites' own completion transactions, never by
polling: the record of
the ``joins`` table under a prerequisite's id lists the tasks that wait on it,
and the transaction that finishes the prerequisite reads that list (and deletes
it) in the same transaction as its result, so of two prerequisites finishing at
once in two workers exactly one sees the other's success, and the waiting task's
message is sent exactly once.

This module keeps only that bookkeeping; the waiting task's state changes
(release, void) are :mod:`agentq.lifecycle.tasks`'.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from agentq.backends import Transaction
from agentq.errors import InvalidArguments, TaskNotFound
from agentq.ledger import Tables, TaskStatus

__all__ = ["MAX_PREREQUISITES", "add_waiter", "pending_prerequisites", "take_waiters"]

#: Most tasks one task may wait on (each is a record read in its enqueue).
MAX_PREREQUISITES: Final = 100

#: Statuses from which a task can no longer succeed on its own.
_NEVER_SUCCEEDS = frozenset({TaskStatus.DEAD, TaskStatus.CANCELLED})


def pending_prerequisites(tx: Transaction, after: Iterable[Any]) -> list[str]:
    """Check the tasks a new task is to wait on, read in this transaction; returns
    those that have not succeeded yet (in the order given, duplicates dropped).

    Only existing tasks may be named, and a new task's id does not exist before
    its enqueue, so waits always point at older tasks: no cycle can be built.
    The records are read locked (``lock=True``). An unknown id raises
    :class:`~agentq.errors.TaskNotFound`; a task that is dead
    or cancelled (it can never succeed) raises :class:`~agentq.errors.InvalidArguments`.
    """
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise InvalidArguments(f"after= takes a list of task ids, got {type(after).__name__}")
    ids: list[str] = []
    for item in after:
        task_id = getattr(item, "task_id", item)  # a TaskInfo, or its id
        if not isinstance(task_id, str) or not task_id:
            raise InvalidArguments(f"after= takes task ids (strings), got {task_id!r:.80}")
        if task_id not in ids:
            ids.append(task_id)
    if len(ids) > MAX_PREREQUISITES:
        raise InvalidArguments(
            f"a task may wait on at most {MAX_PREREQUISITES} tasks, got {len(ids)}"
        )
    # Locked as read (one read for all): a worker's completion, which writes the
    # record at READ COMMITTED (a fenced transaction) and then checks that no task
    # waits on it, either waits for this enqueue's commit and then finds its
    # waiter, or has committed first and this read fails as a conflict (then, read
    # again, it has succeeded).
    found = tx.get_records(Tables.TASKS, ids, lock=True)
    pending = []
    for task_id in ids:
        rec = found.get(task_id)
        if rec is None:
            raise TaskNotFound(f"after=: no task {task_id!r} to wait on")
        status = TaskStatus(rec["status"])
        if status in _NEVER_SUCCEEDS:
            raise InvalidArguments(
                f"after=: task {task_id!r} is {status}: it can never succeed, so a task "
                "waiting on it would never run"
            )
        if status is not TaskStatus.SUCCEEDED:
            pending.append(task_id)
    return pending


def add_waiter(tx: Transaction, prerequisite: str, waiter: str) -> None:
    """Record that ``waiter`` waits on ``prerequisite`` (unfinished, read in ``tx``)."""
    rec = tx.get_record(Tables.JOINS, prerequisite) or {"waiters": []}
    if waiter not in rec["waiters"]:
        tx.put_record(Tables.JOINS, prerequisite, {"waiters": [*rec["waiters"], waiter]})


def waited_on(tx: Transaction, task_ids: Sequence[str]) -> set[str]:
    """Which of ``task_ids`` some task waits on (one read for all of them; rarely
    any: PostgreSQL checks that with the commit instead of reading first)."""
    return set(tx.get_records(Tables.JOINS, task_ids, likely_absent=True))


def take_waiters(tx: Transaction, task_id: str) -> list[str]:
    """The tasks waiting on ``task_id``, which is finishing in ``tx``; their list is
    deleted with it (a task finishes once: replay only follows a dead task, whose
    waiters were voided when it died)."""
    rec = tx.get_record(Tables.JOINS, task_id)
    if rec is None:
        return []
    tx.delete_record(Tables.JOINS, task_id)
    return [str(w) for w in rec["waiters"]]
