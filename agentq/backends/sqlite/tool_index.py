"""The tool column on SQLite (:mod:`agentq.backends.tool_column`): a task's
tool, and a durable run's agent.

A task's or run's record is inserted with its name in the column ``tool``
(NULL in other tables' records; later writes leave it), and the partial index
``(tool, tbl, k)`` holds the records that have one. A database made before the
column gets it when it is first opened by this version (:func:`ensure_tool`:
the column added, the tasks' tools and the runs' agents filled in from their
records, the index built, in one write transaction); one that had the column
before the runs joined it gets its runs' agents the same way, once (a mark row
says so). An older agentq writing to it afterwards leaves the column unset on
the records it inserts: a tool or agent listing misses those (it re-checks
nothing it does not find), as with the owner column.
"""

from __future__ import annotations

import sqlite3

from agentq.backends.sqlite.added_columns import ensure_column, fill_from_records
from agentq.backends.tool_column import TOOL_FIELDS, TOOL_TABLES

__all__ = ["TOOL_INDEX", "ensure_tool"]

#: The name of the tool column's index.
TOOL_INDEX = "agentq_records_tool"

_RUNS_MARK = "runs_agent"

_MIGRATION = (
    "ALTER TABLE agentq_records ADD COLUMN tool TEXT",
    *fill_from_records("tool", TOOL_FIELDS, TOOL_TABLES),
    f"CREATE INDEX IF NOT EXISTS {TOOL_INDEX} ON agentq_records (tool, tbl, k) "
    "WHERE tool IS NOT NULL",
)
# The durable runs joined the column after the tasks: a database that had it
# gets its runs' agents once, and the mark says so.
_RUNS_LATE = tuple(fill_from_records("tool", TOOL_FIELDS, ("runs",)))


def ensure_tool(conn: sqlite3.Connection) -> None:
    """Give a database without the tool column the column, its values and its
    index, and one whose runs were stored before they joined the column their
    agents, in one write transaction (two processes opening it at once do it
    once); a database that has them is only read."""
    ensure_column(conn, "tool", _RUNS_MARK, _MIGRATION, _RUNS_LATE)
