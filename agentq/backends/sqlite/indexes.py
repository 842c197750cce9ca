"""The tasks' index of rare statuses on SQLite (issue 38 item 1).

A task's status is kept in the record's JSON, and also, when it is rare (none
of :data:`~agentq.backends.base.COMMON_TASK_STATUSES`: dead, cancelled,
awaiting approval, waiting, a retry scheduled, an outcome unknown), in the
column ``rare_status`` that the record writes set (NULL otherwise, and in
every other table's records). A partial index of that column holds the few
records an operator looks for among many finished ones. It costs the worker's
writes next to nothing: the column is a value the writer already has (no JSON
parsed in SQL: an index of ``json_extract(v, '$.status')`` cost a claim and a
completion 4-8 µs each, measured by ``tests/bench/record_writes.py``), and a
task that goes queued -> running -> succeeded never enters the index.

The records of :data:`~agentq.backends.base.COUNTED_TABLES` (tasks, dead
letters) are counted in ``agentq_record_totals`` by triggers on insert and on
delete only: a record's updates (every claim, every completion) run none, and
an insert pays one upsert of a row per table. (A record put over an existing
one is an upsert, not ``INSERT OR REPLACE``, whose replacing delete fires no
trigger.)

A database made before the column gets it when it is first opened by this
version (:func:`ensure_rare_status`: the column added, the rare tasks' values
filled in, the index built, the records counted, in one write transaction). An
older agentq writing to it afterwards would leave the column unset on its
writes (its record puts would count twice).
"""

from __future__ import annotations

import sqlite3

from agentq.backends.base import (
    COMMON_TASK_STATUSES,
    COUNTED_TABLES,
    OPEN_APPROVAL_STATUSES,
    check_counted,
)
from agentq.backends.record_pages import PageDialect

__all__ = ["DIALECT", "RARE_INDEX", "ensure_rare_status", "record_count"]

#: The name of the tasks' index of rare statuses.
RARE_INDEX = "agentq_records_rare_status"

_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {RARE_INDEX} ON agentq_records (rare_status, tbl, k) "
    "WHERE rare_status IS NOT NULL"
)
_STATUS = "json_extract(v, '$.status')"
_COMMON = ", ".join(f"'{s}'" for s in COMMON_TASK_STATUSES)
_OPEN = ", ".join(f"'{s}'" for s in OPEN_APPROVAL_STATUSES)
_FILL = (
    f"UPDATE agentq_records SET rare_status = {_STATUS} "
    "WHERE tbl IN ('tasks', 'approvals') AND json_valid(v) "
    f"AND json_type(v, '$.status') = 'text' AND CASE tbl WHEN 'tasks' "
    f"THEN {_STATUS} NOT IN ({_COMMON}) ELSE {_STATUS} IN ({_OPEN}) END"
)

#: How a page of records is written here (:mod:`agentq.backends.record_pages`).
DIALECT = PageDialect(
    records="agentq_records", mark="?", field=lambda name: f"json_extract(v, '$.{name}')",
    false="0", indexed_by=f" INDEXED BY {RARE_INDEX}", owners=True,
    owner_indexed_by=" INDEXED BY agentq_records_owner",
    owner_rare_indexed_by=" INDEXED BY agentq_records_owner_rare",
)  # fmt: skip


_TABLES = ", ".join(f"'{t}'" for t in COUNTED_TABLES)
_TOTALS = (
    "CREATE TABLE IF NOT EXISTS agentq_record_totals (tbl TEXT PRIMARY KEY, "
    "n INTEGER NOT NULL) WITHOUT ROWID",
    *(f"CREATE TRIGGER IF NOT EXISTS agentq_records_total_{name} AFTER {name.upper()} "
      f"ON agentq_records WHEN {row}.tbl IN ({_TABLES}) BEGIN "
      f"INSERT INTO agentq_record_totals (tbl, n) VALUES ({row}.tbl, {n}) "
      f"ON CONFLICT (tbl) DO UPDATE SET n = n + excluded.n; END"
      for name, row, n in (("insert", "new", 1), ("delete", "old", -1))),
    "INSERT INTO agentq_record_totals (tbl, n) SELECT tbl, count(*) FROM agentq_records "
    f"WHERE tbl IN ({_TABLES}) GROUP BY tbl",
)  # fmt: skip


def _has_totals(conn: sqlite3.Connection) -> bool:
    find = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentq_record_totals'"
    return conn.execute(find).fetchone() is not None


def record_count(conn: sqlite3.Connection, table: str) -> int:
    """How many records ``table`` holds, from the totals the triggers keep."""
    check_counted(table)
    row = conn.execute("SELECT n FROM agentq_record_totals WHERE tbl = ?", (table,)).fetchone()
    return 0 if row is None else int(row[0])


def _has_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "rare_status" for row in conn.execute("PRAGMA table_info(agentq_records)"))


def ensure_rare_status(conn: sqlite3.Connection) -> None:
    """Give a database made before the rare-status column and the totals the
    column, its values, its index and the totals, in one write transaction (two
    processes opening it at once fill it once); a database that has them is
    only read."""
    if _has_column(conn) and _has_totals(conn):
        conn.execute(_INDEX)  # a no-op once built
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _has_column(conn):
            conn.execute("ALTER TABLE agentq_records ADD COLUMN rare_status TEXT")
            conn.execute(_FILL)
        conn.execute(_INDEX)
        if not _has_totals(conn):
            for statement in _TOTALS:
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
