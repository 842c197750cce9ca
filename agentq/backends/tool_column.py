"""The tasks' tool column (issue 38 item 1): what every backend keeps beside a
task's record so that a listing filtered on a tool alone (``GET
/v1/tasks?tool=refund``, the console's tool filter, ``agentq tasks --tool``)
reads the tool's tasks, not the whole ledger.

A task's record names its tool (``"tool"``), and the tool never changes. So the
records table has a ``tool`` column written when a task's record is inserted
(the value :func:`record_tool` gives; NULL for other tables' records), which
the record's later writes (claims, completions) leave as it is: they touch no
index of it (on PostgreSQL they stay HOT updates). One partial index,
``(tool, tbl, k)`` of the rows that have one, is walked once per tool asked
for, in key order, and any other filter is checked on the rows it walks.

An enqueue pays one more index entry for it (measured in the closing note of
issue 38). A listing that can walk a narrower index walks that one instead: an
owner's (an agent's own listing) or the rare statuses' (``dead``,
``awaiting_approval``); a listing of queued or running tasks reads the
unfinished work (:mod:`agentq.runtime.open_pages`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentq.backends.record_filters import RecordFilter
from agentq.backends.record_text import _UNSAID, EncodedRecord, _loads

__all__ = ["TOOL_FIELD", "TOOL_TABLES", "record_tool", "tool_walks"]

#: The record tables whose records the tool column names the tool of.
TOOL_TABLES = ("tasks",)
#: The record field the tool column holds.
TOOL_FIELD = "tool"


def record_tool(table: str, value: Mapping[str, Any] | str) -> str | None:
    """What the tool column of a record of ``table`` holds: its
    :data:`TOOL_FIELD` when that is a string and ``table`` is one of
    :data:`TOOL_TABLES`, else None (not in the tool index). An encoded record
    says it (:attr:`EncodedRecord.tool`) without being parsed."""
    if table not in TOOL_TABLES:
        return None
    if isinstance(value, EncodedRecord) and value.tool is not _UNSAID:
        tool = value.tool
    else:
        if not isinstance(value, Mapping):
            value = _loads(value)
            if not isinstance(value, Mapping):
                return None
        tool = value.get(TOOL_FIELD)
    return tool if isinstance(tool, str) else None


def tool_walks(table: str, where: RecordFilter | None) -> list[str] | None:
    """The tools a listing of ``table`` filtered by ``where`` walks the tool
    index for (sorted), or None if it does not: only a filter on
    :data:`TOOL_FIELD` whose values are all strings (a record without one is
    not in the index) of a table in :data:`TOOL_TABLES`. A backend walks it
    only when no narrower index serves the listing (an owner's, the rare
    statuses')."""
    if table not in TOOL_TABLES or not where or TOOL_FIELD not in where:
        return None
    wanted = list(where[TOOL_FIELD])
    if any(not isinstance(v, str) for v in wanted):
        return None
    return sorted(set(wanted))  # type: ignore[arg-type]
