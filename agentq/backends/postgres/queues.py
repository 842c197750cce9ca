"""Queues as PostgreSQL tables in agentq's schema: DDL, prepared SQL, stored specs.

Each queue is a table named like the queue (quoted: names keep their case) in
agentq's schema. Besides the key columns, ``payload`` (bytea) and
``deliver_time`` (microseconds since the epoch, from the backend's clock as on
SQLite, so leases and delivery follow one clock) it keeps ``agentq_*`` system
columns: the message id, the lease sequence and expiry, the expiry count for
backoff, and ``agentq_visible_at``, the one indexed time at which the message is
next receivable. A queue with a ``parent`` gets a foreign key to the
application's table (in the connection's ``search_path``) with ``ON DELETE
CASCADE``, as an interleaved Spanner queue is deleted with its parent row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentq.backends.postgres.prepared import prepared
from agentq.backends.postgres.schema import ddl, qualified
from agentq.errors import ConfigError
from agentq.spec import (
    KeyType,
    QueueSpec,
    check_new_queue_name,
    spec_from_json,
    spec_to_json,
)

if TYPE_CHECKING:
    from agentq.backends.postgres.connection import Conn

__all__ = [
    "QueueSQL",
    "create_queue",
    "ddl_statements",
    "decode_or_raw",
    "exists_as",
    "load_spec",
    "queue_names",
]

_SQL_TYPES = {KeyType.INT: "bigint", KeyType.STR: "text", KeyType.BYTES: "bytea"}
_MAX_NAME_BYTES = 63  # PostgreSQL truncates longer identifiers (NAMEDATALEN - 1)


def _index_name(queue: str, what: str) -> str:
    # Short and unique whatever the queue's length (an index name is also <= 63 bytes).
    return f"aq_{hashlib.sha1(queue.encode()).hexdigest()[:16]}_{what}"


class QueueSQL:
    """Prepared SQL text of one queue (identifiers already validated)."""

    def __init__(self, spec: QueueSpec, schema: str) -> None:
        self.spec = spec
        self.schema = schema
        q = qualified(schema, spec.name)
        self.table = q
        keys = [f'"{c.name}"' for c in spec.key]
        self.key_list = ", ".join(keys)
        self.key_where = " AND ".join(f"{k} = %s" for k in keys)
        marks = ", ".join(["%s"] * len(keys))
        # Sent at once (the application's own transaction), ON CONFLICT DO NOTHING: a
        # duplicate key is reported without aborting the server's transaction (the
        # backend then refuses to commit it).
        # Held back for the transaction's next round trip (pipeline.TxConn.defer): a
        # duplicate key fails the statement, and with it the transaction.
        # The statements marked prepared() are a worker's and an enqueue's: each
        # connection prepares them once (.prepared), not planned at every call.
        self.insert_strict = prepared(
            f"INSERT INTO {q} ({self.key_list}, payload, deliver_time, agentq_visible_at, "
            f"agentq_lease_seq) VALUES ({marks}, %s, %s, %s, %s)"
        )
        self.insert = f"{self.insert_strict} ON CONFLICT ({self.key_list}) DO NOTHING"
        self.delete = f"DELETE FROM {q} WHERE {self.key_where}"
        # A set of keys in one statement: one array per key column, zipped by unnest.
        arrays = ", ".join(f"%b::{_SQL_TYPES[c.type]}[]" for c in spec.key)
        names = ", ".join(f"k{i}" for i in range(len(keys)))
        matches = " AND ".join(f"t.{k} = x.k{i}" for i, k in enumerate(keys))
        self.delete_many = prepared(
            f"DELETE FROM {q} AS t USING unnest({arrays}) AS x({names}) WHERE {matches} RETURNING 1"
        )
        # SKIP LOCKED: a message another receiver is leasing right now is passed
        # over, never handed out twice and never waited for.
        self.select_ready = prepared(
            f"SELECT agentq_msg_id, {self.key_list}, payload, deliver_time, agentq_lease_seq, "
            f"agentq_lease_expiry, agentq_expirations FROM {q} "
            "WHERE agentq_visible_at <= %s ORDER BY agentq_visible_at, agentq_msg_id LIMIT %s "
            "FOR UPDATE SKIP LOCKED"
        )
        # The same, with each message's record of a records table (its key: the
        # message's first key column), for a claim made with the lease.
        first = keys[0]
        self.select_ready_with_record = prepared(
            f"SELECT q.agentq_msg_id, {', '.join(f'q.{k}' for k in keys)}, q.payload, "
            "q.deliver_time, q.agentq_lease_seq, q.agentq_lease_expiry, q.agentq_expirations, "
            f"r.v FROM {q} AS q LEFT JOIN {qualified(schema, 'records')} AS r "
            f'ON r.tbl = %s AND r.k = (q.{first}::text COLLATE "C") '
            "WHERE q.agentq_visible_at <= %s ORDER BY q.agentq_visible_at, q.agentq_msg_id "
            "LIMIT %s FOR UPDATE OF q SKIP LOCKED"
        )
        self.update_lease = (
            f"UPDATE {q} SET agentq_lease_seq = %s, agentq_lease_expiry = %s, "
            "agentq_visible_at = %s, agentq_expirations = %s WHERE agentq_msg_id = %s"
        )
        # Every leased row of a batch in one statement: arrays of the new lease
        # sequence, expiry, visible-at time and expiry count, by message id.
        self.update_leases = prepared(
            f"UPDATE {q} AS t SET agentq_lease_seq = x.seq, agentq_lease_expiry = x.expiry, "
            "agentq_visible_at = x.visible, agentq_expirations = x.expirations "
            "FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[], %b::integer[], %b::bigint[]) "
            "AS x(seq, expiry, visible, expirations, id) WHERE t.agentq_msg_id = x.id"
        )
        self.select_for_renew = (
            f"SELECT agentq_lease_seq, deliver_time, agentq_expirations FROM {q} "
            "WHERE agentq_msg_id = %s FOR UPDATE"
        )
        self.next_visible = f"SELECT min(agentq_visible_at) FROM {q}"
        self.ttl_delete = f"DELETE FROM {q} WHERE deliver_time < %s"
        self.stats = (
            "SELECT count(*), "
            "count(*) FILTER (WHERE agentq_visible_at <= %(now)s), "
            "count(*) FILTER (WHERE agentq_lease_expiry IS NULL AND deliver_time > %(now)s), "
            "count(*) FILTER (WHERE agentq_lease_expiry > %(now)s), "
            "min(deliver_time) FILTER (WHERE deliver_time <= %(now)s) "
            f"FROM {q}"
        )

    def ddl(self, parent: tuple[str, list[str]] | None) -> list[str]:
        spec = self.spec
        cols = [f'"{c.name}" {_SQL_TYPES[c.type]} NOT NULL' for c in spec.key]
        fk = ""
        if parent is not None:
            table, parent_keys = parent
            child = ", ".join(f'"{c.name}"' for c in spec.key[: len(parent_keys)])
            cols_of_parent = ", ".join(f'"{k}"' for k in parent_keys)
            fk = (
                f",\n    FOREIGN KEY ({child}) REFERENCES {table} ({cols_of_parent}) "
                "ON DELETE CASCADE"
            )
        table_ddl = (
            f"CREATE TABLE {self.table} (\n"
            "    agentq_msg_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
            f"    {', '.join(cols)},\n"
            "    payload bytea NOT NULL,\n"
            "    deliver_time bigint NOT NULL,\n"
            "    agentq_visible_at bigint NOT NULL,\n"
            "    agentq_lease_seq bigint NOT NULL DEFAULT 0,\n"
            "    agentq_lease_expiry bigint,\n"
            "    agentq_expirations integer NOT NULL DEFAULT 0,\n"
            f"    UNIQUE ({self.key_list}){fk}\n)"
        )
        stmts = [
            table_ddl,
            f'CREATE INDEX "{_index_name(spec.name, "visible")}" '
            f"ON {self.table} (agentq_visible_at, agentq_msg_id)",
        ]
        if spec.ttl is not None:
            stmts.append(
                f'CREATE INDEX "{_index_name(spec.name, "deliver")}" ON {self.table} (deliver_time)'
            )
        return stmts


def ddl_statements(schema: str, specs: Sequence[QueueSpec]) -> list[str]:
    """What ``agentq init`` creates in a new database: the schema, and the
    tables of queues without a parent, with their stored specs (``--print-ddl``)."""
    out = ddl(schema)
    for spec in specs:
        sql = QueueSQL(spec, schema)
        out += sql.ddl(None)
        text = spec_to_json(spec).replace("'", "''")
        out.append(
            f"INSERT INTO {qualified(schema, 'queues')} (name, spec) "
            f"VALUES ('{spec.name}', '{text}') ON CONFLICT DO NOTHING"
        )
    return out


def create_queue(conn: Conn, schema: str, spec: QueueSpec) -> None:
    """Create the queue's table and record its spec (inside a write transaction).

    As on every backend: the same spec again does nothing; another spec, another
    case of an existing queue's name, or the name of an application table is a
    :class:`ConfigError`.
    """
    if len(spec.name.encode()) > _MAX_NAME_BYTES:
        raise ConfigError(
            f"queue {spec.name!r} cannot be created on PostgreSQL: names are at most "
            f"{_MAX_NAME_BYTES} bytes there"
        )
    specs = qualified(schema, "queues")
    # One queue creation at a time: the case check below reads every name.
    conn.execute(f"LOCK TABLE {specs} IN SHARE ROW EXCLUSIVE MODE")
    row = conn.execute(f"SELECT spec FROM {specs} WHERE name = %s", (spec.name,)).fetchone()
    wanted = spec_to_json(spec)
    if row is not None:
        if row[0] != wanted:
            raise ConfigError(f"queue {spec.name!r} already exists with a different spec: {row[0]}")
        return
    check_new_queue_name(spec.name, queue_names(conn, schema))
    clash = conn.execute(
        "SELECT n.nspname, c.relname, c.relkind FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE lower(c.relname) = lower(%s) AND c.relkind IN ('r', 'v', 'm', 'p', 'f') "
        "AND (n.nspname = %s OR n.nspname = ANY (current_schemas(false)))",
        (spec.name, schema),
    ).fetchone()
    if clash is not None:
        kind = "view" if clash[2] in ("v", "m") else "table"
        raise ConfigError(
            f"queue {spec.name!r} cannot be created: the database already has a "
            f"{kind} {clash[1]!r} (schema {clash[0]!r}) that is not an agentq queue; "
            "choose another name"
        )
    parent = None if spec.parent is None else _parent(conn, spec)
    sql = QueueSQL(spec, schema)
    for stmt in sql.ddl(parent):
        conn.execute(stmt)
    conn.execute(f"INSERT INTO {specs} (name, spec) VALUES (%s, %s)", (spec.name, wanted))


def _parent(conn: Conn, spec: QueueSpec) -> tuple[str, list[str]]:
    """The parent table (as it is named in SQL) and its primary key columns.

    ``parent="Orders"`` finds a table created as ``"Orders"`` or, as unquoted
    identifiers fold to lower case, as ``Orders`` (stored ``orders``).
    """
    name = spec.parent or ""
    oid = None
    for candidate in (f'"{name}"', f'"{name.lower()}"'):
        oid = conn.execute("SELECT to_regclass(%s)::oid", (candidate,)).fetchone()
        if oid is not None and oid[0] is not None:
            break
    if oid is None or oid[0] is None:
        raise ConfigError(
            f"queue {spec.name!r}: parent table {name!r} does not exist in the search_path"
        )
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i "
        "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, pos) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.pos",
        (oid[0],),
    ).fetchall()
    parent_keys = [r[0] for r in rows]
    if not parent_keys:
        raise ConfigError(f"queue {spec.name!r}: parent table {name!r} has no primary key")
    prefix = [c.name for c in spec.key[: len(parent_keys)]]
    if [p.lower() for p in prefix] != [k.lower() for k in parent_keys]:
        raise ConfigError(
            f"queue {spec.name!r}: its leading key columns {prefix} must be the "
            f"primary key of {name!r} {parent_keys}"
        )
    table = conn.execute("SELECT %s::regclass::text", (oid[0],)).fetchone()
    return (table[0] if table else f'"{name}"'), parent_keys


def exists_as(conn: Conn, schema: str, spec: QueueSpec) -> bool:
    """Whether queue ``spec.name`` is there with this very spec: a plain read, so
    that opening a runtime over queues that exist writes nothing (a role that may
    only read opens it too)."""
    row = conn.execute(
        f"SELECT spec FROM {qualified(schema, 'queues')} WHERE name = %s", (spec.name,)
    ).fetchone()
    return row is not None and row[0] == spec_to_json(spec)


def load_spec(conn: Conn, schema: str, name: str) -> QueueSpec | None:
    """The stored spec of queue ``name``, or None if there is no such queue."""
    row = conn.execute(
        f"SELECT spec FROM {qualified(schema, 'queues')} WHERE name = %s", (name,)
    ).fetchone()
    return None if row is None else spec_from_json(row[0])


def queue_names(conn: Conn, schema: str) -> list[str]:
    """Every queue of the schema, by name."""
    rows = conn.execute(
        f'SELECT name FROM {qualified(schema, "queues")} ORDER BY name COLLATE "C"'
    ).fetchall()
    return [r[0] for r in rows]


def decode_or_raw(spec: QueueSpec, data: bytes) -> Any:
    """The payload, or its raw text if it is not valid JSON (written around agentq):
    the consumer then sees a malformed payload and can dead-letter it."""
    try:
        return spec.decode_payload(bytes(data))
    except ValueError:
        return bytes(data).decode("utf-8", errors="replace")
