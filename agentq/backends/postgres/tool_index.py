"""The tasks' tool column on PostgreSQL (:mod:`agentq.backends.tool_column`).

Schema version 6 adds the column ``tool`` (written by a task's insert only:
later writes never name it, so they stay HOT updates), fills it for the tasks
already stored, and builds the partial index ``(tool, tbl, k)`` of the rows
that have one.
"""

from __future__ import annotations

from agentq.backends.tool_column import TOOL_FIELD, TOOL_TABLES

__all__ = ["TOOL_DDL"]

_TABLES = ", ".join(f"'{t}'" for t in TOOL_TABLES)

#: The migration's statements (``{s}``: the quoted schema name).
TOOL_DDL: tuple[str, ...] = (
    "ALTER TABLE {s}.records ADD COLUMN tool text",
    # Parsed as json with any \u0000 made a space first (jsonb refuses it; a
    # tool's name never holds one, its arguments may).
    "UPDATE {s}.records SET tool = j.v ->> '" + TOOL_FIELD + "' FROM (SELECT tbl AS t, "
    "k AS key, replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records "
    f"WHERE tbl IN ({_TABLES})) AS j WHERE tbl = j.t AND k = j.key "
    "AND json_typeof(j.v -> '" + TOOL_FIELD + "') = 'string'",
    "CREATE INDEX records_tool ON {s}.records (tool, tbl, k) WHERE tool IS NOT NULL",
)
