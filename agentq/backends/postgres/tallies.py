"""The per-minute tallies of finished tasks on PostgreSQL (:mod:`agentq.backends.tallies`).

Schema version 3 (:mod:`~agentq.backends.postgres.schema`: tasks finished
before it are not counted, so an upgraded database's chart starts empty).
Not a counter row that every completion updates: the workers' completions
run concurrently (and, where they are not fenced,
SERIALIZABLE), so a shared row would make them wait on one another and fail
each other's checks. A completion group appends its rows to
``task_tally_changes``, a table with no index that no write reads (one
multi-row ``INSERT``, held for the transaction's next round trip: no round
trip of its own). A read folds the changes into ``task_tallies`` (keyed by
minute, owner, outcome and bucket) first, in autocommit (a concurrent fold
waits for the rows this one deletes, then finds them gone), then sums both in
one snapshot for the window, as :mod:`~agentq.backends.postgres.totals` does
for the record counts; a role that may not write there reads without folding.
A prune deletes old minutes from both (and folds first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentq.backends.postgres.pipeline import run_or_defer
from agentq.backends.postgres.prepared import prepared
from agentq.backends.tallies import Tally, check_tallies, check_window

if TYPE_CHECKING:
    from agentq.backends.postgres.connection import Conn

__all__ = ["add", "delete_before", "fold", "read"]

def add(conn: object, s: str, tallies: Sequence[Tally]) -> None:
    """Append ``tallies`` with the transaction on ``conn`` (its next round trip);
    ``s``: the quoted schema."""
    check_tallies(tallies)
    columns: list[list[object]] = [[], [], [], [], []]
    for t in tallies:
        for column, value in zip(columns, (t.minute, t.owner, t.outcome, t.bucket, t.count),
                                 strict=True):  # fmt: skip
            column.append(value)
    query = prepared(
        f"INSERT INTO {s}.task_tally_changes (minute, owner, outcome, bucket, n) "
        "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::integer[], "
        "%s::integer[])"
    )
    run_or_defer(conn, query, columns)


def fold(conn: Conn, schema: str) -> int:
    """Fold the appended changes into ``task_tallies``; returns how many change
    rows went (0 where this role may not write: reads sum them instead)."""
    return _fold(conn, f'"{schema}"')


def _fold(conn: Conn, s: str) -> int:
    import psycopg

    try:
        row = conn.execute(
            f"WITH moved AS (DELETE FROM {s}.task_tally_changes RETURNING *), "
            f"folded AS (INSERT INTO {s}.task_tallies (minute, owner, outcome, bucket, n) "
            "SELECT minute, owner, outcome, bucket, sum(n) FROM moved "
            "GROUP BY minute, owner, outcome, bucket "
            f"ON CONFLICT (minute, owner, outcome, bucket) DO UPDATE "
            f"SET n = {s}.task_tallies.n + excluded.n) "
            "SELECT count(*) FROM moved"
        ).fetchone()
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
        return 0  # the read sums the changes too
    return int(row[0]) if row else 0


def read(
    conn: Conn, schema: str, first: int, end: int, width: int, owner: str | None
) -> list[Tally]:
    """The window's tallies, the changes folded in first where this role may."""
    check_window(first, end, width)
    s = f'"{schema}"'
    _fold(conn, s)
    mine = "" if owner is None else " AND owner = %(owner)s"
    both = " UNION ALL ".join(
        f"SELECT minute, outcome, bucket, n FROM {s}.{table} "
        f"WHERE minute >= %(first)s AND minute < %(end)s{mine}"
        for table in ("task_tallies", "task_tally_changes")
    )
    rows = conn.execute(
        f"SELECT %(first)s + (minute - %(first)s) / %(width)s * %(width)s AS slot, outcome, "
        f"bucket, sum(n) FROM ({both}) AS t GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        {"first": first, "end": end, "width": width, "owner": owner},
    ).fetchall()
    who = "" if owner is None else owner
    return [Tally(int(m), who, str(o), int(b), int(n)) for m, o, b, n in rows if n]


def delete_before(conn: Conn, schema: str, before: int) -> int:
    """Delete the tallies of minutes before ``before`` (folded first)."""
    s = f'"{schema}"'
    _fold(conn, s)
    gone = conn.execute(f"DELETE FROM {s}.task_tallies WHERE minute < %s", (before,)).rowcount
    more = conn.execute(f"DELETE FROM {s}.task_tally_changes WHERE minute < %s", (before,))
    return gone + more.rowcount
