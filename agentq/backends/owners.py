"""The tasks' owner column (issue 38 item 1): what SQLite and PostgreSQL keep
beside a task's record so that one owner's reads cost a page, not the owner's
history.

Every task has an owner, its record's ``created_by`` (the principal that
enqueued it). A principal without the operate or admin scope sees only its own
tasks: its task listing (``GET /v1/tasks`` as an agent, the console's task
page) filters on ``created_by``, and its overview counts its own tasks. Both
used to read every task of the owner's (the filter checked in each record's
JSON): 7.6 s for an agent's task page at a million tasks on PostgreSQL.

So the records table has an ``owner`` column, written when a task's record is
inserted (the value :func:`record_owner` gives; NULL for other tables' records
and for a task without a string ``created_by``). An owner never changes, so
the record's later writes (claims, completions: whole-record puts and field
updates) leave the column as it is: they touch no index of it, and stay HOT
updates on PostgreSQL. Two partial indexes hold the tasks that have one:

* ``(owner, tbl, k)``: a listing filtered on owners (:func:`owner_walks`)
  walks it once per owner, in key order, and reads the page it returns (any
  other filter, a status of the common ones, is checked on the rows it walks);
* ``(owner, rare_status, tbl, k)`` of the tasks in a rare status: a listing
  filtered on owners and rare statuses only walks it once per owner and status
  (an agent's dead tasks, the per-owner overview's unfinished ones).

Durable runs have owners too (a run's ``owner``: the principal that started
it), and a principal that does not see everyone's runs lists its own (``GET
/v1/runs``, the console's runs page): the run's owner is kept in the same
column and indexes (:data:`OWNER_FIELDS` names each table's field), so that
listing reads the owner's runs, not every run's conversation.

Each backend also counts the tasks of each owner, in the transaction of each
insert and delete as it counts the tasks (:meth:`Backend.record_count` with
``owner``), so a principal's overview reads its finished tasks as that total
less its unfinished ones, never the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.backends.base import EncodedRecord, RecordFilter
from agentq.backends.record_text import _UNSAID, _loads

__all__ = ["OWNED_TABLES", "OWNER_FIELD", "OWNER_FIELDS", "owner_walks", "record_owner"]

#: The record field the owner column holds for a task.
OWNER_FIELD = "created_by"
#: The record tables whose records the owner column names the owner of, and
#: the field it holds for each.
OWNER_FIELDS: Mapping[str, str] = {"runs": "owner", "tasks": OWNER_FIELD}
OWNED_TABLES = tuple(sorted(OWNER_FIELDS))


def record_owner(table: str, value: Mapping[str, Any] | str) -> str | None:
    """What the owner column of a record of ``table`` holds: its field of
    :data:`OWNER_FIELDS` when that is a string, else None (not in the owner
    indexes; so for a table not in :data:`OWNED_TABLES`). An encoded task says
    it (:attr:`EncodedRecord.owner`) without being parsed."""
    field = OWNER_FIELDS.get(table)
    if field is None:
        return None
    if field == OWNER_FIELD and isinstance(value, EncodedRecord) and value.owner is not _UNSAID:
        owner = value.owner
    else:
        if not isinstance(value, Mapping):
            value = _loads(value)
            if not isinstance(value, Mapping):
                return None
        owner = value.get(field)
    return owner if isinstance(owner, str) else None


def owner_walks(table: str, where: RecordFilter | None) -> list[str] | None:
    """The owners a listing of ``table`` filtered by ``where`` walks the owner
    index for (sorted), or None if it does not: only a filter on the table's
    field of :data:`OWNER_FIELDS` whose values are all strings (a record
    without one is not in the index)."""
    field = OWNER_FIELDS.get(table)
    if field is None or not where or field not in where:
        return None
    wanted = list(where[field])
    if any(not isinstance(v, str) for v in wanted):
        return None
    return sorted(set(wanted))  # type: ignore[arg-type]
