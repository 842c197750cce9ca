"""The tasks' owner column on SQLite (:mod:`agentq.backends.owners`).

A task's record is inserted with its owner in the column ``owner`` (NULL in
every other table's records); the record's later writes leave it alone. Two
partial indexes hold the tasks that have one: ``(owner, tbl, k)`` for an
owner's listing, ``(owner, rare_status, tbl, k)`` for its tasks in a rare
status. Triggers on insert and on delete (none on update) count each owner's
tasks in a row of ``agentq_records`` itself, as :mod:`.totals` counts the
tasks: table ``tasks#owner`` (no record table can be called so), the owner as
its key, the count as its value. ``#`` sorts before every character of an
identifier, so those rows sit right after the newest task (and its count):
an enqueue updates its owner's count on the page it writes anyway while the
owners are few, not on a page of a table of its own.

A durable run's owner (its ``owner``) is kept in the same column, indexes and
counts (:data:`~agentq.backends.owners.OWNER_FIELDS`).

A database made before the column gets it when this version first opens it
(:func:`ensure_owner`: the column added, the tasks' and runs' owners filled in
from their records, the indexes built, the owners' records counted, in one
write transaction); one that had the column before the runs joined it gets
its runs' owners and their counts the same way, once (a mark row says so).
"""

from __future__ import annotations

import sqlite3

from agentq.backends.owners import OWNED_TABLES, OWNER_FIELDS
from agentq.backends.record_filters import check_counted
from agentq.backends.sqlite.added_columns import ensure_column, fill_from_records

__all__ = ["OWNER_COUNT_SUFFIX", "OWNER_INDEX", "OWNER_RARE_INDEX", "ensure_owner",
           "owner_count"]  # fmt: skip

#: What a table's name is followed by in the name of its owners' counts' rows.
OWNER_COUNT_SUFFIX = "#owner"
#: The names of the owner column's indexes.
OWNER_INDEX = "agentq_records_owner"
OWNER_RARE_INDEX = "agentq_records_owner_rare"

_RUNS_MARK = "runs_owner"


def _fill(tables: tuple[str, ...]) -> list[str]:
    """Set the owner column of the records of ``tables`` from their records."""
    return fill_from_records("owner", OWNER_FIELDS, tables)


_MIGRATION = ("ALTER TABLE agentq_records ADD COLUMN owner TEXT", *_fill(OWNED_TABLES))
_INDEXES = (
    f"CREATE INDEX IF NOT EXISTS {OWNER_INDEX} ON agentq_records (owner, tbl, k) "
    "WHERE owner IS NOT NULL",
    f"CREATE INDEX IF NOT EXISTS {OWNER_RARE_INDEX} ON agentq_records "
    "(owner, rare_status, tbl, k) WHERE owner IS NOT NULL AND rare_status IS NOT NULL",
)
_TOTALS = (
    f"INSERT INTO agentq_records (tbl, k, v) SELECT tbl || '{OWNER_COUNT_SUFFIX}', owner, "
    "count(*) FROM agentq_records WHERE owner IS NOT NULL GROUP BY tbl, owner",
    *(f"CREATE TRIGGER agentq_records_owner_{name} AFTER {name.upper()} ON agentq_records "
      f"WHEN {row}.owner IS NOT NULL BEGIN INSERT INTO agentq_records (tbl, k, v) "
      f"VALUES ({row}.tbl || '{OWNER_COUNT_SUFFIX}', {row}.owner, {n}) "
      "ON CONFLICT (tbl, k) DO UPDATE SET v = CAST(v AS INTEGER) + excluded.v; END"
      for name, row, n in (("insert", "new", 1), ("delete", "old", -1))),
)  # fmt: skip


# The durable runs joined the column after the tasks: a database that had it
# gets its runs' owners and their counts once, and this mark says so.
_RUNS_LATE = (
    *_fill(("runs",)),
    f"INSERT INTO agentq_records (tbl, k, v) SELECT 'runs{OWNER_COUNT_SUFFIX}', owner, count(*) "
    "FROM agentq_records WHERE tbl = 'runs' AND owner IS NOT NULL GROUP BY owner "
    "ON CONFLICT (tbl, k) DO UPDATE SET v = excluded.v",
)


def ensure_owner(conn: sqlite3.Connection) -> None:
    """Give a database without the owner column the column, its values, its
    indexes and the owners' totals, and one whose runs were stored before they
    joined the column their owners, in one write transaction (two processes
    opening it at once do it once); a database that has them is only read."""
    ensure_column(conn, "owner", _RUNS_MARK, (*_MIGRATION, *_INDEXES, *_TOTALS), _RUNS_LATE)


def owner_count(conn: sqlite3.Connection, table: str, owner: str) -> int:
    """How many records of ``table`` ``owner`` has, from the owners' totals
    (0 for a table the owner column does not cover)."""
    check_counted(table)
    row = conn.execute(
        "SELECT CAST(v AS INTEGER) FROM agentq_records WHERE tbl = ? AND k = ?",
        (table + OWNER_COUNT_SUFFIX, owner),
    ).fetchone()
    return 0 if row is None else int(row[0])
