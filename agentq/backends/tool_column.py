"""The name column (issue 38 item 1), still called ``tool`` in every backend's
SQL: what every backend keeps beside a task's or a durable run's record so that
a listing filtered on a tool or an agent alone (``GET /v1/tasks?tool=refund``,
the console's tool filter, ``agentq tasks --tool``; ``GET /v1/runs?agent=x``,
the console's and ``agentq runs``' agent filter) reads that name's records, not
the whole table.

Each table in it names one field (:data:`TOOL_FIELDS`): a task's record names
its tool (``"tool"``), a run's its agent (``"agent"``). **For a run, the column
named ``tool`` holds its agent.** (The column kept the name it shipped with:
renaming it would be a migration for nothing.) Neither name ever changes: a
task's tool is set when it is enqueued, and a run's agent when it is started
(:func:`agentq.lifecycle.runs.create`; every later write of the run, a turn, a
park, an approval, a message, a cancel, stores the record read with its
``agent`` as it was). So the records table has a ``tool`` column written when
the record is inserted (the value :func:`record_tool` gives; NULL for other
tables' records), which the record's later writes (claims, completions,
turns) leave as it is: they touch no index of it (on SQLite, and on PostgreSQL
they stay HOT updates when nothing else indexed changes). One partial index,
``(tool, tbl, k)`` of the rows that have one, is walked once per name asked
for, in key order, and any other filter is checked on the rows it walks.

An enqueue or a run's start pays one more index entry for it (measured in the
closing note of issue 38). A listing that can walk a narrower index walks that
one instead: an owner's (an agent's own listing, a principal's own runs) or
the rare statuses' (``dead``, ``awaiting_approval``, runs in progress); a
listing of queued or running tasks reads the unfinished work
(:mod:`agentq.runtime.open_pages`).

The runs joined the column after the tasks: a database whose runs were stored
before gets their agents once (SQLite when opened, PostgreSQL schema version 9,
Spanner at ``agentq init``), and until then Spanner filters their JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.backends.record_filters import RecordFilter
from agentq.backends.record_text import _UNSAID, EncodedRecord, _loads

__all__ = ["TOOL_FIELD", "TOOL_FIELDS", "TOOL_TABLES", "record_tool", "tool_walks"]

#: The record field the tool column holds for a task.
TOOL_FIELD = "tool"
#: The record tables whose records the tool column names, and the field it
#: holds for each (a run's agent).
TOOL_FIELDS: Mapping[str, str] = {"runs": "agent", "tasks": TOOL_FIELD}
TOOL_TABLES = tuple(sorted(TOOL_FIELDS))


def record_tool(table: str, value: Mapping[str, Any] | str) -> str | None:
    """What the tool column of a record of ``table`` holds: its field of
    :data:`TOOL_FIELDS` when that is a string, else None (not in the tool
    index; so for a table not in :data:`TOOL_TABLES`). An encoded task says it
    (:attr:`EncodedRecord.tool`) without being parsed."""
    field = TOOL_FIELDS.get(table)
    if field is None:
        return None
    if field == TOOL_FIELD and isinstance(value, EncodedRecord) and value.tool is not _UNSAID:
        tool = value.tool
    else:
        if not isinstance(value, Mapping):
            value = _loads(value)
            if not isinstance(value, Mapping):
                return None
        tool = value.get(field)
    return tool if isinstance(tool, str) else None


def tool_walks(table: str, where: RecordFilter | None) -> list[str] | None:
    """The names a listing of ``table`` filtered by ``where`` walks the tool
    index for (sorted), or None if it does not: only a filter on the table's
    field of :data:`TOOL_FIELDS` whose values are all strings (a record without
    one is not in the index). A backend walks it only when no narrower index
    serves the listing (an owner's, the rare statuses')."""
    field = TOOL_FIELDS.get(table)
    if field is None or not where or field not in where:
        return None
    wanted = list(where[field])
    if any(not isinstance(v, str) for v in wanted):
        return None
    return sorted(set(wanted))  # type: ignore[arg-type]
