"""Columns of ``agentq_records`` added after databases were made (the owner,
tool and rare-status columns): how a database opened by this version gets
one, once.

Each column is filled from the records when it is added, and a table that
joined the column later (the durable runs) is filled once more, behind a mark
row (table ``agentq#marks``, no record table can be called so), in one write
transaction: two processes opening the database at once do it once, and a
database that has it all is only read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence

__all__ = ["MARKS", "ensure_column", "fill_from_records", "has_column", "marked"]

#: The record table of the marks.
MARKS = "agentq#marks"


def fill_from_records(column: str, fields: Mapping[str, str], tables: Sequence[str]) -> list[str]:
    """The statements setting ``column`` of the records of ``tables`` from the
    records' field ``fields[table]`` (where it is a string)."""
    out = []
    for table in tables:
        field = f"'$.{fields[table]}'"
        out.append(f"UPDATE agentq_records SET {column} = json_extract(v, {field}) "
                   f"WHERE tbl = '{table}' AND json_valid(v) "
                   f"AND json_type(v, {field}) = 'text'")  # fmt: skip
    return out


def has_column(conn: sqlite3.Connection, column: str) -> bool:
    """Whether ``agentq_records`` has ``column``."""
    return any(row[1] == column for row in conn.execute("PRAGMA table_info(agentq_records)"))


def marked(conn: sqlite3.Connection, mark: str) -> bool:
    """Whether the mark row ``mark`` exists."""
    found = conn.execute(
        "SELECT 1 FROM agentq_records WHERE tbl = ? AND k = ?", (MARKS, mark)
    ).fetchone()
    return found is not None


def ensure_column(
    conn: sqlite3.Connection,
    column: str,
    mark: str,
    added: Sequence[str],
    late: Sequence[str],
    *,
    current: Callable[[sqlite3.Connection], bool] = lambda conn: True,
    then: Callable[[sqlite3.Connection], None] = lambda conn: None,
) -> bool:
    """Give a database without ``column`` the statements ``added`` (the column,
    its values, its indexes), one that has it and not ``mark`` the statements
    ``late``, then the mark and ``then(conn)``, in one write transaction; a
    database that has the column, the mark and is ``current`` is only read
    (returns False then, True when it wrote)."""
    if has_column(conn, column) and marked(conn, mark) and current(conn):
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not has_column(conn, column):  # again, under the write lock
            for statement in added:
                conn.execute(statement)
        elif not marked(conn, mark):
            for statement in late:
                conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO agentq_records (tbl, k, v) VALUES (?, ?, '1')",
                     (MARKS, mark))  # fmt: skip
        then(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True
