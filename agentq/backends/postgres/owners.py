"""The tasks' owner column on PostgreSQL (:mod:`agentq.backends.owners`).

Schema version 4 adds the column ``owner`` (written by a task's insert only:
the record's later writes leave it alone, so a worker's updates stay HOT), its
two partial indexes, and the owners' totals: row triggers on insert and on
delete append ``+1`` or ``-1`` per owner to ``owner_total_changes`` (no index,
no write reads it: concurrent enqueues of one owner never conflict, as with
:mod:`.totals`), and a count folds them into ``owner_totals`` first. Schema
version 7 puts the durable runs' owners in the same column (their counts too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentq.backends.owners import OWNER_FIELD, OWNER_FIELDS
from agentq.backends.record_filters import check_counted

if TYPE_CHECKING:
    from agentq.backends.postgres.connection import Conn

__all__ = ["OWNER_DDL", "RUNS_OWNER_DDL", "owner_count"]

#: The statements of schema version 4 (``{s}``: the schema), as shipped: the
#: tasks' owners only.
OWNER_DDL: tuple[str, ...] = (
    "ALTER TABLE {s}.records ADD COLUMN owner text",
    # Backfilled before the indexes exist: the rewrite of each task's row is HOT.
    "UPDATE {s}.records SET owner = j.v ->> '" + OWNER_FIELD + "' FROM (SELECT tbl AS t, "
    "k AS key, replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records "
    "WHERE tbl IN ('tasks')) AS j WHERE tbl = j.t AND k = j.key "
    f"AND json_typeof(j.v -> '{OWNER_FIELD}') = 'string'",
    "CREATE INDEX records_owner ON {s}.records (owner, tbl, k) WHERE owner IS NOT NULL",
    "CREATE INDEX records_owner_rare ON {s}.records (owner, rare_status, tbl, k) "
    "WHERE owner IS NOT NULL AND rare_status IS NOT NULL",
    "CREATE TABLE {s}.owner_totals (tbl text NOT NULL, owner text NOT NULL, "
    "n bigint NOT NULL, PRIMARY KEY (tbl, owner))",
    "CREATE TABLE {s}.owner_total_changes (tbl text NOT NULL, owner text NOT NULL, "
    "n integer NOT NULL)",
    "CREATE FUNCTION {s}.count_owner_total() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP = 'INSERT' THEN INSERT INTO {s}.owner_total_changes VALUES (NEW.tbl, NEW.owner, 1); "
    "ELSE INSERT INTO {s}.owner_total_changes VALUES (OLD.tbl, OLD.owner, -1); END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER records_owner_insert AFTER INSERT ON {s}.records FOR EACH ROW "
    "WHEN (NEW.owner IS NOT NULL) EXECUTE FUNCTION {s}.count_owner_total()",
    "CREATE TRIGGER records_owner_delete AFTER DELETE ON {s}.records FOR EACH ROW "
    "WHEN (OLD.owner IS NOT NULL) EXECUTE FUNCTION {s}.count_owner_total()",
    "INSERT INTO {s}.owner_totals (tbl, owner, n) SELECT tbl, owner, count(*) "
    "FROM {s}.records WHERE owner IS NOT NULL GROUP BY tbl, owner",
)

_RUN_OWNER = OWNER_FIELDS["runs"]
#: The statements of schema version 7: the durable runs' owners in the column
#: (the record writes set it from now on), and their counts (an update runs no
#: counting trigger: the runs filled here are counted by the last statement).
RUNS_OWNER_DDL: tuple[str, ...] = (
    "UPDATE {s}.records SET owner = j.v ->> '" + _RUN_OWNER + "' FROM (SELECT k AS key, "
    "replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records WHERE tbl = 'runs') AS j "
    "WHERE tbl = 'runs' AND k = j.key AND owner IS NULL "
    f"AND json_typeof(j.v -> '{_RUN_OWNER}') = 'string'",
    "INSERT INTO {s}.owner_total_changes (tbl, owner, n) SELECT tbl, owner, count(*) "
    "FROM {s}.records WHERE tbl = 'runs' AND owner IS NOT NULL GROUP BY tbl, owner",
)


def owner_count(conn: Conn, schema: str, table: str, owner: str) -> int:
    """How many records of ``table`` ``owner`` has, the changes folded in first
    where this role may."""
    import psycopg

    check_counted(table)
    s = f'"{schema}"'
    try:
        conn.execute(
            f"WITH moved AS (DELETE FROM {s}.owner_total_changes RETURNING tbl, owner, n) "
            f"INSERT INTO {s}.owner_totals (tbl, owner, n) SELECT tbl, owner, sum(n) FROM moved "
            f"GROUP BY tbl, owner ON CONFLICT (tbl, owner) DO UPDATE SET "
            f"n = {s}.owner_totals.n + excluded.n"
        )
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
        pass  # the sum below reads the changes too
    row = conn.execute(
        f"SELECT (SELECT coalesce(sum(n), 0) FROM {s}.owner_totals WHERE tbl = %s AND owner = %s)"
        f" + (SELECT coalesce(sum(n), 0) FROM {s}.owner_total_changes "
        "WHERE tbl = %s AND owner = %s)",
        (table, owner, table, owner),
    ).fetchone()
    return 0 if row is None else int(row[0])
