"""Pages of tasks filtered on ``queued`` or ``running``, read from the unfinished work.

The index of rare statuses leaves these two out, so that a worker's status
changes touch no index (:data:`~agentq.backends.base.COMMON_TASK_STATUSES`). A
listing filtered on them therefore walked the ledger in key order and checked
every record on the way: with 100,000 finished tasks and none running, a page of
running tasks read all 100,000 (86 ms on SQLite; ten times that at a million).

Only a task that a queue holds a message for, or that an ordering key holds
back, can be queued or running (:func:`agentq.overview.open_task_ids`: the
messages' keys and the keys' records, no record text). Where those candidates
are few beside the ledger, a page reads them by key, in key order from the
cursor, a chunk at a time, and keeps the records that pass the filter as the
backend's listing would (:func:`~agentq.backends.record_filters.record_matches`).
Where they are not (a backlog), the ledger's own walk finds matches at least as
soon, and is kept; so is the walk of the owners' index for a listing of some
owners' tasks (an agent's own) that hold fewer tasks than the candidates.

A backlog is told by counting the task queues' messages no further than the
share of the ledger that decides (:meth:`~agentq.backends.Backend.message_count`)
before any key is read: reading every key of a 100,000-message backlog to find
that it is one cost 50 ms on SQLite, most of a page that then walks the ledger.

A page of running tasks only counts and reads the keys of the messages
delivered at least once: a task is running only once its message was, and in
a backlog those are the few the workers hold (or held, and died). A page of
them at 100,000 queued walked the ledger: 81 ms on SQLite, 194 ms on
PostgreSQL. Spanner's queues do not tell which messages were delivered: there
it is as for queued tasks.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from agentq.backends import Backend
from agentq.backends.owners import owner_walks
from agentq.backends.record_filters import RecordFilter, record_matches
from agentq.ledger import Tables
from agentq.overview import open_task_ids, task_queues

__all__ = ["OPEN_STATUSES", "open_candidates", "open_chunk"]

#: The statuses only unfinished work can be in, and the index does not hold.
OPEN_STATUSES = frozenset({"queued", "running"})
#: The candidates are read where they are at most this share of the ledger.
_AT_MOST = 0.25
#: Records read by key per query.
_CHUNK = 200


def open_candidates(
    backend: Backend, where: Mapping[str, Sequence[str | None]]
) -> list[str] | None:
    """The ids (sorted) of the tasks a listing filtered by ``where`` may return,
    when its status filter asks only for queued or running tasks and they are
    few beside the ledger's tasks; otherwise None (walk the ledger)."""
    statuses = where.get("status")
    if not statuses or not set(statuses) <= OPEN_STATUSES:
        return None
    most = int(_AT_MOST * backend.record_count(Tables.TASKS))
    queues = task_queues(backend)
    # A running task's message was delivered: in a backlog those are few.
    running = set(statuses) == {"running"}
    if _messages_exceed(backend, queues, most, running):
        return None
    ids = open_task_ids(backend, queues, running=running)
    if len(ids) > most:
        return None
    walks = owner_walks(Tables.TASKS, where)
    if walks is not None and sum(backend.record_count(Tables.TASKS, owner=o)
                                 for o in walks) <= len(ids):  # fmt: skip
        return None  # the owners' index holds fewer tasks than the candidates
    return sorted(ids)


def _messages_exceed(backend: Backend, queues: list[str], most: int, delivered: bool) -> bool:
    """Whether ``queues`` hold more than ``most`` messages (``delivered`` ones),
    counting no further than that."""
    left = most + 1
    for name in queues:
        left -= backend.message_count(name, at_most=left, delivered=delivered)
        if left <= 0:
            return True
    return False


def open_chunk(
    backend: Backend,
    candidates: list[str],
    size: int,
    after: str,
    newest_first: bool,
    where: RecordFilter,
) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """Up to ``size`` records of ``candidates`` past ``after`` (below it with
    ``newest_first``) that pass ``where``, in key order; and whether more do."""
    if newest_first:
        keys = candidates[: bisect_left(candidates, after) if after else len(candidates)][::-1]
    else:
        keys = candidates[bisect_right(candidates, after) if after else 0 :]
    rows: list[tuple[str, dict[str, Any]]] = []
    for first in range(0, len(keys), _CHUNK):
        chunk = keys[first : first + _CHUNK]
        found = backend.read_records(Tables.TASKS, chunk)
        for key in chunk:
            stored = found.get(key)
            if stored is not None and record_matches(stored.value, where):
                if len(rows) == size:
                    return rows, True
                rows.append((key, stored.value))
    return rows, False
