"""The SQL of :meth:`~agentq.backends.Backend.undelivered_backlog` on SQLite
and PostgreSQL: a task queue's messages no worker has leased, joined to their
tasks' records and counted by the tool column in the database.

Why the database counts them: during a backlog of 100,000 queued tasks the
overview's per-tool figures (``agentq inspect``) and an agent's own counts read
and decoded every queued record (1.1-1.8 s), to learn three fields. The join
reads the queue's rows, the records' key index and their tool and owner
columns, and takes ``created_at`` out of the record's JSON for the oldest; only
the groups cross to Python.

Which rows: the message was never leased (``agentq_lease_expiry`` is set by a
worker's first lease and never cleared), and the record's status is not rare
(``rare_status`` is NULL for queued, running and succeeded, the common ones).
A task runs only once its message was leased, and succeeds only from running,
so every such task is queued.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentq.backends.queue_values import BacklogGroup

__all__ = ["backlog_groups", "backlog_params", "backlog_sql"]

#: The record table of the tasks (the runtime's ledger names it so).
_TASKS = "tasks"


def backlog_sql(
    queue_table: str, task_column: str, records_table: str, *, created_at: str | None,
    mark: str, owner: bool, join: str,
) -> str:
    """The query: ``queue_table`` and ``records_table`` already quoted (and
    qualified), ``task_column`` the queue's quoted first key column,
    ``created_at`` the SQL of the record's ``created_at`` over ``r.v`` (None:
    the oldest is not asked for, and no record's JSON is read), ``mark`` the
    driver's placeholder. Its parameters: the tasks' table's name, then the
    owner when ``owner``.

    ``join``: SQLite's ``CROSS JOIN`` keeps the queue as the outer loop, a
    record looked up by key per message: SQLite plans without statistics, and
    chose to scan the records (the ledger) for a queue of a few messages.
    PostgreSQL's plain ``JOIN`` lets the planner, with the tables' statistics,
    look the records up by key when the queue is the smaller (the usual
    case), or hash the two when a backlog is most of the ledger (measured at
    100,000 queued of 100,000: 201 ms, against 769 ms by key)."""
    only_owner = f" AND r.owner = {mark}" if owner else ""
    oldest = "NULL" if created_at is None else f"min({created_at})"
    return (
        f"SELECT r.tool, count(*), {oldest} FROM {queue_table} AS m "
        f"{join} {records_table} AS r ON r.tbl = {mark} AND r.k = m.{task_column} "
        f"WHERE m.agentq_lease_expiry IS NULL AND r.rare_status IS NULL{only_owner} "
        "GROUP BY r.tool"
    )


def backlog_params(owner: str | None) -> tuple[str, ...]:
    """The parameters of :func:`backlog_sql` for ``owner`` (None: everyone's)."""
    return (_TASKS,) if owner is None else (_TASKS, owner)


def backlog_groups(rows: Iterable[Any]) -> list[BacklogGroup]:
    """The groups of the query's rows, by tool."""
    groups = [
        BacklogGroup(None if tool is None else str(tool), int(count),
                     None if oldest is None else str(oldest))
        for tool, count, oldest in rows
    ]  # fmt: skip
    return sorted(groups, key=lambda g: (g.tool is None, g.tool or ""))
