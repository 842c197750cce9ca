"""The tasks' tool column on SQLite (:mod:`agentq.backends.tool_column`).

A task's record is inserted with its tool in the column ``tool`` (NULL in other
tables' records; later writes leave it), and the partial index ``(tool, tbl,
k)`` holds the tasks that have one. A database made before the column gets it
when it is first opened by this version (:func:`ensure_tool`: the column added,
the tasks' tools filled in from their records, the index built, in one write
transaction). An older agentq writing to it afterwards leaves the column unset
on the tasks it inserts: a tool listing misses those (it re-checks nothing it
does not find), as with the owner column.
"""

from __future__ import annotations

import sqlite3

from agentq.backends.tool_column import TOOL_FIELD, TOOL_TABLES

__all__ = ["TOOL_INDEX", "ensure_tool"]

#: The name of the tool column's index.
TOOL_INDEX = "agentq_records_tool"

_TABLES = ", ".join(f"'{t}'" for t in TOOL_TABLES)
_FIELD = f"'$.{TOOL_FIELD}'"
_MIGRATION = (
    "ALTER TABLE agentq_records ADD COLUMN tool TEXT",
    f"UPDATE agentq_records SET tool = json_extract(v, {_FIELD}) WHERE tbl IN ({_TABLES}) "
    f"AND json_valid(v) AND json_type(v, {_FIELD}) = 'text'",
    f"CREATE INDEX IF NOT EXISTS {TOOL_INDEX} ON agentq_records (tool, tbl, k) "
    "WHERE tool IS NOT NULL",
)


def _has_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "tool" for row in conn.execute("PRAGMA table_info(agentq_records)"))


def ensure_tool(conn: sqlite3.Connection) -> None:
    """Give a database without the tool column the column, its values and its
    index, in one write transaction (two processes opening it at once do it
    once); a database that has them is only read."""
    if _has_column(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _has_column(conn):  # again, under the write lock
            for statement in _MIGRATION:
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
