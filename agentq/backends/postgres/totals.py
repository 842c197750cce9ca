"""How many records the counted tables hold, on PostgreSQL (issue 38 item 1).

The records of :data:`~agentq.backends.base.COUNTED_TABLES` (tasks, dead
letters) are counted by row triggers on insert and on delete (a record's
updates, every claim and completion, run none). Not as a counter the trigger
updates: every enqueue of every process would update the same row, and under
SERIALIZABLE those transactions would fail each other's checks. The trigger
appends ``+1`` or ``-1`` to ``record_total_changes``, a table with no index
that no write reads. Reading a count folds the changes into ``record_totals``
first (one statement, in autocommit: a concurrent fold waits for the rows this
one deletes, then finds them gone), then sums both in one snapshot. A role that
may not write there reads the sum without folding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentq.backends.base import COUNTED_TABLES

if TYPE_CHECKING:
    from agentq.backends.postgres.connection import Conn

__all__ = ["TOTALS_DDL", "record_count"]

_TABLES = ", ".join(f"'{t}'" for t in COUNTED_TABLES)

#: The statements of schema version 2 that create the totals (``{s}``: the schema).
TOTALS_DDL: tuple[str, ...] = (
    "CREATE TABLE {s}.record_totals (tbl text PRIMARY KEY, n bigint NOT NULL)",
    "CREATE TABLE {s}.record_total_changes (tbl text NOT NULL, n integer NOT NULL)",
    "CREATE FUNCTION {s}.count_record_total() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP = 'INSERT' THEN INSERT INTO {s}.record_total_changes VALUES (NEW.tbl, 1); "
    "ELSE INSERT INTO {s}.record_total_changes VALUES (OLD.tbl, -1); END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER records_total_insert AFTER INSERT ON {s}.records FOR EACH ROW "
    f"WHEN (NEW.tbl IN ({_TABLES})) EXECUTE FUNCTION {{s}}.count_record_total()",
    "CREATE TRIGGER records_total_delete AFTER DELETE ON {s}.records FOR EACH ROW "
    f"WHEN (OLD.tbl IN ({_TABLES})) EXECUTE FUNCTION {{s}}.count_record_total()",
    # The records that were there before the totals.
    f"INSERT INTO {{s}}.record_totals (tbl, n) SELECT tbl, count(*) FROM {{s}}.records "
    f"WHERE tbl IN ({_TABLES}) GROUP BY tbl",
)


def record_count(conn: Conn, schema: str, table: str) -> int:
    """The count of ``table``, the changes folded in first where this role may."""
    import psycopg

    s = f'"{schema}"'
    try:
        conn.execute(
            f"WITH moved AS (DELETE FROM {s}.record_total_changes RETURNING tbl, n) "
            f"INSERT INTO {s}.record_totals (tbl, n) SELECT tbl, sum(n) FROM moved GROUP BY tbl "
            f"ON CONFLICT (tbl) DO UPDATE SET n = {s}.record_totals.n + excluded.n"
        )
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
        pass  # the sum below reads the changes too
    row = conn.execute(
        f"SELECT (SELECT coalesce(sum(n), 0) FROM {s}.record_totals WHERE tbl = %s) + "
        f"(SELECT coalesce(sum(n), 0) FROM {s}.record_total_changes WHERE tbl = %s)",
        (table, table),
    ).fetchone()
    return 0 if row is None else int(row[0])
