"""How many records the counted tables hold, on SQLite (issue 38 items 1 and 3).

The records of :data:`~agentq.backends.base.COUNTED_TABLES` (tasks, dead
letters) are counted by triggers on insert and on delete only: a record's
updates (every claim, every completion) run none. A record put over an
existing one is an upsert, not ``INSERT OR REPLACE``, whose replacing delete
fires no trigger, so it is not counted twice.

Each table's count is a row of ``agentq_records`` itself, under the table name
``<table>#count`` (which no record table can be called: names are
identifiers) and the empty key; its value is the count's text. ``#`` sorts
before every character of an identifier, so ``tasks#count`` is the entry right
after the last task, and a new task (its id grows with time: :mod:`agentq.ids`)
is written next to it: the enqueue's commit dirties the page it writes anyway,
where a table of totals of its own cost one more page per commit (8 KiB more
to write and sync; measured: 6.1 -> 5.1 WAL frames per one-task commit).

A database counted the earlier way (an ``agentq_record_totals`` table kept by
the triggers ``agentq_records_total_*``) is moved to this one when it is first
opened by this version (:func:`ensure_counts`, in the write transaction that
brings the schema forward): the old triggers and table dropped, the records
counted again. An older agentq opening it afterwards finds no totals table and
makes and fills its own again, as it did for a database without one.
"""

from __future__ import annotations

import sqlite3

from agentq.backends.base import COUNTED_TABLES, check_counted

__all__ = ["COUNT_SUFFIX", "counts_current", "ensure_counts", "record_count"]

#: What a counted table's name is followed by in the name of its count's row.
COUNT_SUFFIX = "#count"

_TABLES = ", ".join(f"'{t}'" for t in COUNTED_TABLES)
_COUNTS = ", ".join(f"'{t}{COUNT_SUFFIX}'" for t in COUNTED_TABLES)
_TRIGGERS = tuple(f"agentq_records_count_{name}" for name in ("insert", "delete"))
_OLD = ("agentq_record_totals", "agentq_records_total_insert", "agentq_records_total_delete")

_CREATE = tuple(
    f"CREATE TRIGGER IF NOT EXISTS agentq_records_count_{name} AFTER {name.upper()} "
    f"ON agentq_records WHEN {row}.tbl IN ({_TABLES}) BEGIN "
    f"INSERT INTO agentq_records (tbl, k, v) VALUES ({row}.tbl || '{COUNT_SUFFIX}', '', {n}) "
    "ON CONFLICT (tbl, k) DO UPDATE SET v = CAST(v AS INTEGER) + excluded.v; END"
    for name, row, n in (("insert", "new", 1), ("delete", "old", -1))
)
_RECOUNT = (
    f"DELETE FROM agentq_records WHERE tbl IN ({_COUNTS})",
    f"INSERT INTO agentq_records (tbl, k, v) SELECT tbl || '{COUNT_SUFFIX}', '', count(*) "
    f"FROM agentq_records WHERE tbl IN ({_TABLES}) GROUP BY tbl",
)


def record_count(conn: sqlite3.Connection, table: str) -> int:
    """How many records ``table`` holds, from the count the triggers keep."""
    check_counted(table)
    row = conn.execute(
        "SELECT CAST(v AS INTEGER) FROM agentq_records WHERE tbl = ? AND k = ''",
        (table + COUNT_SUFFIX,),
    ).fetchone()
    return 0 if row is None else int(row[0])


def counts_current(conn: sqlite3.Connection) -> bool:
    """Whether the database counts its records this way (and not the old one)."""
    marks = ", ".join("?" * (len(_TRIGGERS) + len(_OLD)))
    found = {name for (name,) in conn.execute(
        f"SELECT name FROM sqlite_master WHERE name IN ({marks})", (*_TRIGGERS, *_OLD)
    )}  # fmt: skip
    return found == set(_TRIGGERS)


def ensure_counts(conn: sqlite3.Connection) -> None:
    """In the open write transaction: count the records this way unless the
    database already does (the old totals dropped, everything counted again)."""
    if counts_current(conn):
        return
    for trigger in _OLD[1:]:
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute(f"DROP TABLE IF EXISTS {_OLD[0]}")
    for statement in (*_CREATE, *_RECOUNT):
        conn.execute(statement)
