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

from agentq.backends.tool_column import TOOL_FIELDS, TOOL_TABLES

__all__ = ["TOOL_INDEX", "ensure_tool"]

#: The name of the tool column's index.
TOOL_INDEX = "agentq_records_tool"

_MARKS, _RUNS_MARK = "agentq#marks", "runs_agent"


def _fill(tables: tuple[str, ...]) -> list[str]:
    """Set the tool column of the records of ``tables`` from their records."""
    out = []
    for table in tables:
        field = f"'$.{TOOL_FIELDS[table]}'"
        out.append(f"UPDATE agentq_records SET tool = json_extract(v, {field}) "
                   f"WHERE tbl = '{table}' AND json_valid(v) AND json_type(v, {field}) = 'text'")
    return out


_MIGRATION = (
    "ALTER TABLE agentq_records ADD COLUMN tool TEXT",
    *_fill(TOOL_TABLES),
    f"CREATE INDEX IF NOT EXISTS {TOOL_INDEX} ON agentq_records (tool, tbl, k) "
    "WHERE tool IS NOT NULL",
)
# The durable runs joined the column after the tasks: a database that had it
# gets its runs' agents once, and the mark says so.
_RUNS_LATE = tuple(_fill(("runs",)))


def _has_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "tool" for row in conn.execute("PRAGMA table_info(agentq_records)"))


def _runs_marked(conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        "SELECT 1 FROM agentq_records WHERE tbl = ? AND k = ?", (_MARKS, _RUNS_MARK)
    ).fetchone()
    return found is not None


def ensure_tool(conn: sqlite3.Connection) -> None:
    """Give a database without the tool column the column, its values and its
    index, and one whose runs were stored before they joined the column their
    agents, in one write transaction (two processes opening it at once do it
    once); a database that has them is only read."""
    if _has_column(conn) and _runs_marked(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _has_column(conn):  # again, under the write lock
            for statement in _MIGRATION:
                conn.execute(statement)
        elif not _runs_marked(conn):
            for statement in _RUNS_LATE:
                conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO agentq_records (tbl, k, v) VALUES (?, ?, '1')",
                     (_MARKS, _RUNS_MARK))  # fmt: skip
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
