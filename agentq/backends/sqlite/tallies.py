"""The per-minute tallies of finished tasks on SQLite (:mod:`agentq.backends.tallies`).

One row per minute, owner, outcome and histogram bucket, upserted by the
transaction that finishes the tasks: SQLite has one writer at a time, so a
shared row costs no wait the write lock does not already cost. The table is
created when a database is opened (a database made before it gets it then,
empty: tasks finished before the upgrade are not counted).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from agentq.backends.tallies import Tally, check_tallies, check_window

__all__ = ["SCHEMA", "add", "delete_before", "read"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentq_task_tallies (
    minute INTEGER NOT NULL,
    owner TEXT NOT NULL,
    outcome TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (minute, owner, outcome, bucket)
) WITHOUT ROWID;
"""

_ADD = (
    "INSERT INTO agentq_task_tallies (minute, owner, outcome, bucket, n) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (minute, owner, outcome, bucket) DO UPDATE SET n = n + excluded.n"
)


def add(conn: sqlite3.Connection, tallies: Sequence[Tally]) -> None:
    """Add ``tallies`` in the open write transaction (each key once)."""
    check_tallies(tallies)
    conn.executemany(_ADD, _summed(tallies))


def _summed(tallies: Sequence[Tally]) -> list[tuple[int, str, str, int, int]]:
    sums: dict[tuple[int, str, str, int], int] = {}
    for t in tallies:
        key = (t.minute, t.owner, t.outcome, t.bucket)
        sums[key] = sums.get(key, 0) + t.count
    return [(*key, n) for key, n in sums.items()]


def read(
    conn: sqlite3.Connection, first: int, end: int, width: int, owner: str | None
) -> list[Tally]:
    """The window's tallies, summed per slot in the query."""
    check_window(first, end, width)
    mine = "" if owner is None else " AND owner = ?"
    rows = conn.execute(
        f"SELECT ? + (minute - ?) / ? * ?, outcome, bucket, sum(n) FROM agentq_task_tallies "
        f"WHERE minute >= ? AND minute < ?{mine} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        (first, first, width, width, first, end, *(() if owner is None else (owner,))),
    ).fetchall()
    who = "" if owner is None else owner
    return [Tally(int(m), who, str(o), int(b), int(n)) for m, o, b, n in rows if n]


def delete_before(conn: sqlite3.Connection, before: int) -> int:
    """Delete the tallies of minutes before ``before`` (in a write transaction)."""
    return conn.execute("DELETE FROM agentq_task_tallies WHERE minute < ?", (before,)).rowcount
