"""The tool column on PostgreSQL (:mod:`agentq.backends.tool_column`): a
task's tool, and a durable run's agent.

Schema version 6 adds the column ``tool`` (written by a record's insert only:
later writes never name it, so a task's stay HOT updates), fills it for the
tasks already stored, and builds the partial index ``(tool, tbl, k)`` of the
rows that have one. Schema version 9 puts the durable runs' agents in the same
column (:data:`RUNS_AGENT_DDL`; the record writes set it from now on).
"""

from __future__ import annotations

from agentq.backends.tool_column import TOOL_FIELDS

__all__ = ["RUNS_AGENT_DDL", "TOOL_DDL"]

#: The statements of schema version 6 (``{s}``: the quoted schema name), as
#: shipped: the tasks' tools only.
TOOL_DDL: tuple[str, ...] = (
    "ALTER TABLE {s}.records ADD COLUMN tool text",
    # Parsed as json with any \u0000 made a space first (jsonb refuses it; a
    # tool's name never holds one, its arguments may).
    "UPDATE {s}.records SET tool = j.v ->> 'tool' FROM (SELECT tbl AS t, "
    "k AS key, replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records "
    "WHERE tbl IN ('tasks')) AS j WHERE tbl = j.t AND k = j.key "
    "AND json_typeof(j.v -> 'tool') = 'string'",
    "CREATE INDEX records_tool ON {s}.records (tool, tbl, k) WHERE tool IS NOT NULL",
)

_AGENT = TOOL_FIELDS["runs"]
#: The statements of schema version 9: the durable runs' agents in the column.
RUNS_AGENT_DDL: tuple[str, ...] = (
    "UPDATE {s}.records SET tool = j.v ->> '" + _AGENT + "' FROM (SELECT k AS key, "
    "replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records WHERE tbl = 'runs') AS j "
    "WHERE tbl = 'runs' AND k = j.key AND tool IS NULL "
    f"AND json_typeof(j.v -> '{_AGENT}') = 'string'",
)
