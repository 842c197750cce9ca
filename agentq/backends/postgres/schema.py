"""agentq's own schema: its tables, its version table, forward migrations.

Everything agentq keeps lives in one schema (``?schema=agentq``, the default),
apart from the application's tables: the queues' stored specs and counters,
the records (ledger, approvals, audit, payloads, schedules, key slots, rate
limits) and one table per queue. ``schema_version`` holds the migrations
applied; a later release appends to :data:`MIGRATIONS` and never edits one
that shipped. Applying them takes a transaction-scoped advisory lock, so
processes starting together do not race; a role that may not create the
schema still works once someone else did (``agentq init``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from agentq.backends.postgres.owners import OWNER_DDL, RUNS_OWNER_DDL
from agentq.backends.postgres.tool_index import RUNS_AGENT_DDL, TOOL_DDL
from agentq.backends.postgres.totals import TOTALS_DDL
from agentq.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "LOCK_WAIT_SECONDS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "check_owners",
    "ddl",
    "ensure_schema",
    "qualified",
    "wakeup_secret",
]

# Version 5's list, as it shipped (version 8 adds the queued runs).
_RARE_RUNS = "'awaiting_approval', 'awaiting_tools', 'cancelled', 'failed'"

#: Each migration: the statements that take the schema from the previous version.
#: ``{s}`` is the quoted schema name.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE {s}.queues (name text PRIMARY KEY, spec text NOT NULL)",
        "CREATE TABLE {s}.queue_counters (queue text PRIMARY KEY, "
        "lease_expirations bigint NOT NULL DEFAULT 0, ttl_dropped bigint NOT NULL DEFAULT 0)",
        # The records as JSON text: the stored text is also the version compared by
        # replace_records, and text keeps exactly what the runtime encoded. Half of
        # each page is left free: a task's record is written once and then updated
        # in place (its claim, its outcome), and with room on its page an update is
        # HOT (no new index entry: less WAL, and no index page shared with another
        # worker's serializable transaction; measured 8% HOT at the default 100,
        # 78% at 50, and 1.5-2x the tasks/s with two workers).
        'CREATE TABLE {s}.records (tbl text NOT NULL, k text COLLATE "C" NOT NULL, '
        "v text NOT NULL, PRIMARY KEY (tbl, k)) WITH (fillfactor = 50)",
    ),
    (
        # Issue 38 item 1: a task's status, when rare (not queued, running or
        # succeeded), and an approval's, when open, in a column the record writes
        # set, with a partial index: a listing of dead or waiting tasks, or of
        # pending approvals, reads those, not the ledger. A column,
        # not an index of v's JSON: an index naming v (or a column that changes on
        # every status change) makes each of the worker's updates non-HOT; this
        # one stays NULL from queued to succeeded.
        "ALTER TABLE {s}.records ADD COLUMN rare_status text",
        "UPDATE {s}.records SET rare_status = j.v ->> 'status' FROM (SELECT tbl AS t, "
        "k AS key, replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records "
        "WHERE tbl IN ('tasks', 'approvals')) AS j WHERE tbl = j.t AND k = j.key "
        "AND json_typeof(j.v -> 'status') = 'string' AND CASE j.t WHEN 'tasks' "
        "THEN j.v ->> 'status' NOT IN ('queued', 'running', 'succeeded') "
        "ELSE j.v ->> 'status' IN ('pending', 'escalated') END",
        "CREATE INDEX records_rare_status ON {s}.records (rare_status, tbl, k) "
        "WHERE rare_status IS NOT NULL",
        *TOTALS_DDL,
    ),
    (
        # Issue 38 item 1: the console chart's per-minute tallies of finished
        # tasks (agentq.backends.postgres.tallies): each completion group appends
        # to the changes (no index: no write reads it), a read folds them into
        # the keyed table. Tasks finished before it are not counted: the chart
        # of an upgraded database starts empty and fills as tasks finish.
        "CREATE TABLE {s}.task_tallies (minute bigint NOT NULL, owner text NOT NULL, "
        "outcome text NOT NULL, bucket integer NOT NULL, n bigint NOT NULL, "
        "PRIMARY KEY (minute, owner, outcome, bucket))",
        "CREATE TABLE {s}.task_tally_changes (minute bigint NOT NULL, owner text NOT NULL, "
        "outcome text NOT NULL, bucket integer NOT NULL, n integer NOT NULL)",
    ),
    # Issue 38 item 1: a task's owner in a column its insert writes, with its
    # indexes and per-owner totals (agentq.backends.postgres.owners): an
    # agent's own listing and overview read a page and counters, not its history.
    OWNER_DDL,
    (
        # Issue 38 item 1: a durable run's status, when parked (awaiting its
        # tool calls or an approval) or ended other than by succeeding, in the
        # rare-status column too (the record writes set it from now on): a
        # listing of such runs walks the index, not every run.
        "UPDATE {s}.records SET rare_status = j.v ->> 'status' FROM (SELECT k AS key, "
        "replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records WHERE tbl = 'runs') AS j "
        "WHERE tbl = 'runs' AND k = j.key AND json_typeof(j.v -> 'status') = 'string' "
        f"AND j.v ->> 'status' IN ({_RARE_RUNS})",
    ),
    # Issue 38 item 1: a task's tool in a column its insert writes, with its
    # index (agentq.backends.postgres.tool_index): a listing filtered on a tool
    # reads that tool's tasks, not the ledger.
    TOOL_DDL,
    # Issue 38 item 1: a durable run's owner in the owner column too, so a
    # principal's own runs listing walks the owner's index, not every run.
    RUNS_OWNER_DDL,
    (
        # Issue 38 item 1: a run in progress (queued, or running: stored as
        # queued) in the rare-status column too: the console's listing of the
        # runs in progress reads those, not every run that ended.
        "UPDATE {s}.records SET rare_status = 'queued' FROM (SELECT k AS key, "
        "replace(v, '\\u0000', '\\u0020')::json AS v FROM {s}.records WHERE tbl = 'runs') AS j "
        "WHERE tbl = 'runs' AND k = j.key AND json_typeof(j.v -> 'status') = 'string' "
        "AND j.v ->> 'status' = 'queued'",
    ),
    # Issue 38 item 1: a durable run's agent in the tool column (the column
    # named tool holds a run's agent), so a listing of an agent's runs walks
    # the tool index, not every run's conversation.
    RUNS_AGENT_DDL,
    # Issue 38 item 1: statistics on the record fields listings filter as JSON
    # text (a task's status and kind: every task listing of the API asks for
    # actions). Without them the planner takes each such filter to keep one row
    # in 200, two of them one in 40,000: a page of queued actions during a
    # backlog, where every record matches, was planned as a scan and sort of the
    # whole ledger (270 ms at 100,000 tasks) instead of a walk of the key index
    # that stops at the page's end (0.5 ms). Statistics on expressions came
    # with PostgreSQL 14; an older server keeps its estimates. They are
    # gathered by the next ANALYZE (autovacuum's, as the ledger grows).
    (
        "DO $do$ BEGIN IF current_setting('server_version_num')::int >= 140000 THEN "
        "EXECUTE $st$CREATE STATISTICS {s}.records_fields ON ((v::json ->> 'status')), "
        "((v::json ->> 'kind')) FROM {s}.records$st$; END IF; END $do$",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
# Any constant works: it only has to be the same in every agentq process.
_LOCK_KEY = 0x61676E7471  # "agntq"
#: Longest wait for the advisory lock (and for the locks of the migration's DDL):
#: another role of the database may take it too, and hold it for ever.
LOCK_WAIT_SECONDS = 30.0


def qualified(schema: str, name: str) -> str:
    """``"schema"."name"`` (both already checked identifiers)."""
    return f'"{schema}"."{name}"'


def ddl(schema: str) -> list[str]:
    """Every statement that creates the schema from nothing (``--print-ddl``)."""
    s = f'"{schema}"'
    out = [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"CREATE TABLE IF NOT EXISTS {s}.schema_version "
        "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
    ]
    for number, statements in enumerate(MIGRATIONS, 1):
        out += [stmt.format(s=s) for stmt in statements]
        out.append(f"INSERT INTO {s}.schema_version (version) VALUES ({number})")
    return out


def _current(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int | None:
    """The schema's version, or None if there is no schema (or no version table)."""
    row = conn.execute("SELECT to_regclass(%s)", (qualified(schema, "schema_version"),)).fetchone()
    if row is None or row[0] is None:
        return None
    found = conn.execute(f"SELECT max(version) FROM {qualified(schema, 'schema_version')}")
    version = found.fetchone()
    return int(str(version[0])) if version and version[0] is not None else 0


# The first object of agentq's schema (the schema itself, then its relations) whose
# owner the connecting role does not trust: not itself or a role it is a member of,
# not a superuser, not the database's owner (an administrator may lay the schema
# out: `agentq init --print-ddl`). A role that may only read (no CREATE on the
# schema, no INSERT on its records) is not asked: it writes nothing an owner could
# read. Relation kinds: tables, partitioned and foreign tables, views, sequences;
# and functions (the records' triggers run them with the writer's rights).
_UNTRUSTED_OWNER = """
SELECT o.kind, o.name, pg_get_userbyid(o.owner), current_user FROM (
    SELECT 0, 'schema', n.nspname::text, n.nspowner FROM pg_namespace n WHERE n.nspname = %(s)s
    UNION ALL
    SELECT 1, 'table', n.nspname || '.' || c.relname, c.relowner
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(s)s AND c.relkind IN ('r', 'p', 'f', 'v', 'm', 'S')
    UNION ALL
    SELECT 2, 'function', n.nspname || '.' || p.proname, p.proowner
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s
) AS o (rank, kind, name, owner)
WHERE NOT pg_has_role(current_user, o.owner, 'MEMBER')
  AND NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = o.owner)
  AND o.owner <> (SELECT d.datdba FROM pg_database d WHERE d.datname = current_database())
  AND (coalesce(has_schema_privilege(to_regnamespace(%(quoted)s)::oid, 'CREATE'), true)
       OR coalesce(has_table_privilege(to_regclass(%(records)s)::oid, 'INSERT'), true))
ORDER BY o.rank, o.name
LIMIT 1
"""


def check_owners(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """Refuse agentq's schema, or a table in it, that another role owns (see
    docs/security.md): its owner could read every task's arguments and rewrite
    approvals (a schema's owner may drop and replace what is in it)."""
    params = {"s": schema, "quoted": f'"{schema}"', "records": qualified(schema, "records")}
    row = conn.execute(_UNTRUSTED_OWNER, params).fetchone()
    if row is None:
        return
    kind, name, owner, me = (str(v) for v in row)
    raise ConfigError(
        f"{kind} {name!r} is owned by role {owner!r}, not by {me!r} (or a role it is a "
        f"member of): agentq will not use it, since its owner could read every task's "
        f"arguments and rewrite approvals. Use a schema of agentq's own (?schema=...), "
        f'or have its owner hand it over (ALTER {kind.upper()} {name} OWNER TO "{me}")'
    )


def ensure_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """Create the schema or bring it forward to :data:`SCHEMA_VERSION`.

    ``conn`` is in autocommit mode; each step is its own transaction. A schema
    already current is only read, so a role without CREATE can use it. A schema
    or a table in it that another role owns is refused (:func:`check_owners`).
    """
    check_owners(conn, schema)
    current = _current(conn, schema)
    if current == SCHEMA_VERSION:
        return
    if current is not None and current > SCHEMA_VERSION:
        raise ConfigError(
            f"schema {schema!r} is at version {current}, newer than this agentq "
            f"({SCHEMA_VERSION}): upgrade agentq"
        )
    from psycopg import errors as pgerr  # here: --print-ddl imports this module without psycopg

    s = f'"{schema}"'
    locked = False
    try:
        with conn.transaction():
            # Bounded: a lock held elsewhere is an error naming it, not a silent wait.
            conn.execute(f"SET LOCAL lock_timeout = '{int(LOCK_WAIT_SECONDS * 1000)}ms'")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            locked = True
            _migrate(conn, schema, s)
    except pgerr.LockNotAvailable as exc:
        what = (
            f"agentq's schema lock (advisory lock {_LOCK_KEY}, which every agentq "
            "process takes to create or migrate its schema)"
            if not locked
            else f"a lock that creating or migrating schema {schema!r} needs"
        )
        held = _holder(conn) if not locked else ""
        raise BackendUnavailable(
            f"PostgreSQL: {what} was not free within {LOCK_WAIT_SECONDS:g} s{held}: another "
            "agentq process may be migrating the schema (try again), or another session "
            "holds it (end that session)"
        ) from exc


def _holder(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """Who holds agentq's advisory lock in this database: ``", held by ..."``."""
    row = conn.execute(
        "SELECT l.pid, coalesce(a.usename::text, '?') FROM pg_locks l "
        "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
        "JOIN pg_database d ON d.oid = l.database AND d.datname = current_database() "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.classid::bigint = %s AND l.objid::bigint = %s LIMIT 1",
        (_LOCK_KEY >> 32, _LOCK_KEY & 0xFFFFFFFF),
    ).fetchone()
    if row is None:
        return ""
    return f", held by the session of pid {row[0]} (role {row[1]!r})"


def _migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str, s: str) -> None:
    """Create the schema if need be and apply the migrations it lacks (inside the
    transaction that holds the advisory lock)."""
    exists = conn.execute("SELECT to_regnamespace(%s)", (s,)).fetchone()
    if exists is None or exists[0] is None:
        conn.execute(f"CREATE SCHEMA {s}")
    check_owners(conn, schema)  # again, under the lock: one made since the first look
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {s}.schema_version "
        "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    current = _current(conn, schema) or 0  # again, under the lock
    for number in range(current + 1, SCHEMA_VERSION + 1):
        for stmt in MIGRATIONS[number - 1]:
            conn.execute(stmt.format(s=s))
        conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (number,))


#: Where the secret part of the wake-up channel's name is kept: a record of
#: agentq's records table (no table of its own: no new schema version, so a
#: process of an earlier release still opens the schema during a rolling deploy).
_SECRET_RECORD = ("agentq.wakeups", "channel")


def wakeup_secret(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> str | None:
    """The random part of the schema's ``LISTEN``/``NOTIFY`` channel name: drawn
    once (128 bits) by the first process that may write, kept in agentq's schema,
    so only roles that may read agentq's tables can name the channel (another role
    of the database cannot listen to it or flood it). None for a role that may not
    read it, or not write it when it is not there yet: that process only polls."""
    from psycopg import errors as pgerr

    records = qualified(schema, "records")
    find = f"SELECT v FROM {records} WHERE tbl = %s AND k = %s"
    try:
        row = conn.execute(find, _SECRET_RECORD).fetchone()
        if row is None:
            drawn = json.dumps(os.urandom(16).hex())
            conn.execute(
                f"INSERT INTO {records} (tbl, k, v) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (*_SECRET_RECORD, drawn),
            )
            row = conn.execute(find, _SECRET_RECORD).fetchone()  # another's, if it was first
    except (pgerr.InsufficientPrivilege, pgerr.ReadOnlySqlTransaction):
        return None
    if row is None:
        return None
    secret = json.loads(str(row[0]))
    return secret if isinstance(secret, str) else None


def notify_sql(schema: str) -> str:
    """``pg_notify`` on the schema's channel (:func:`.wakeups.channel`), its name
    read from the secret's record in SQL; parameters: the notice, then the
    record's ``tbl`` and ``k`` (:func:`notify_params`). Sent as one text with the
    commit (.inline), the statement would otherwise hold the channel's name, and
    a role that may see other sessions' statements (``pg_read_all_stats``, in
    ``pg_stat_activity``) but not agentq's tables would learn it."""
    records = qualified(schema, "records")
    return (
        "SELECT pg_notify(left('agentq_' || (v::json #>> '{}'), 63), %s) "
        f"FROM {records} WHERE tbl = %s AND k = %s"
    )


def notify_params(notice: str) -> tuple[str, str, str]:
    """The parameters of :func:`notify_sql` for ``notice``."""
    return (notice, *_SECRET_RECORD)
