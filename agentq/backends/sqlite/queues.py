"""Queues as SQLite tables: their DDL, their prepared SQL, and the stored specs.

Each queue is a table named like the queue. Besides the key columns,
``payload`` and ``deliver_time`` (microseconds since the epoch) it keeps
``agentq_*`` system columns: the row id, the lease sequence and expiry, the
expiry count for backoff, and ``agentq_visible_at``, the single indexed time at
which the message is next receivable. The declared :class:`QueueSpec` of every
queue is kept as JSON in ``agentq_queues``, so any process opening the file
knows its queues.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from agentq.errors import ConfigError
from agentq.spec import (
    KeyType,
    PayloadType,
    QueueSpec,
    check_new_queue_name,
    spec_from_json,
    spec_to_json,
)

__all__ = [
    "SCHEMA",
    "QueueSQL",
    "create_queue",
    "decode_or_raw",
    "load_spec",
    "queue_names",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentq_queues (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agentq_queue_counters (
    queue TEXT PRIMARY KEY,
    lease_expirations INTEGER NOT NULL DEFAULT 0,
    ttl_dropped INTEGER NOT NULL DEFAULT 0
);
"""

_SQL_TYPES = {KeyType.INT: "INTEGER", KeyType.STR: "TEXT", KeyType.BYTES: "BLOB"}


class QueueSQL:
    """Prepared SQL text of one queue (identifiers already validated)."""

    def __init__(self, spec: QueueSpec) -> None:
        self.spec = spec
        q = f'"{spec.name}"'
        keys = [f'"{c.name}"' for c in spec.key]
        self.key_list = ", ".join(keys)
        self.key_where = " AND ".join(f"{k} = ?" for k in keys)
        self.insert = (
            f"INSERT INTO {q} ({self.key_list}, payload, deliver_time, agentq_visible_at, "
            f"agentq_lease_seq) VALUES ({', '.join('?' * len(keys))}, ?, ?, ?, ?)"
        )
        self.delete = f"DELETE FROM {q} WHERE {self.key_where}"
        # IS: a row written around agentq may even hold NULL in a key column.
        stored_where = " AND ".join(f"{k} IS ?" for k in keys)
        self.delete_stored = f"DELETE FROM {q} WHERE {stored_where}"
        self.select_ready = (
            f"SELECT agentq_msg_id, {self.key_list}, payload, deliver_time, agentq_lease_seq, "
            f"agentq_lease_expiry, agentq_expirations FROM {q} "
            "WHERE agentq_visible_at <= ? ORDER BY agentq_visible_at, agentq_msg_id LIMIT ?"
        )
        self.update_lease = (
            f"UPDATE {q} SET agentq_lease_seq = ?, agentq_lease_expiry = ?, "
            "agentq_visible_at = ?, agentq_expirations = ? WHERE agentq_msg_id = ?"
        )
        self.select_by_id = (
            f"SELECT agentq_lease_seq, deliver_time, agentq_expirations FROM {q} "
            "WHERE agentq_msg_id = ?"
        )
        self.next_visible = f"SELECT MIN(agentq_visible_at) FROM {q}"
        self.any_ready = f"SELECT 1 FROM {q} WHERE agentq_visible_at <= ? LIMIT 1"
        self.ttl_delete = f"DELETE FROM {q} WHERE deliver_time < ?"
        self.stats = (
            "SELECT COUNT(*), "
            "COALESCE(SUM(agentq_visible_at <= :now), 0), "
            "COALESCE(SUM(agentq_lease_expiry IS NULL AND deliver_time > :now), 0), "
            "COALESCE(SUM(agentq_lease_expiry > :now), 0), "
            "MIN(CASE WHEN deliver_time <= :now THEN deliver_time END) "
            f"FROM {q}"
        )

    def ddl(self, parent_keys: list[str] | None) -> list[str]:
        spec = self.spec
        cols = [f'"{c.name}" {_SQL_TYPES[c.type]} NOT NULL' for c in spec.key]
        payload_type = "BLOB" if spec.payload is PayloadType.BYTES else "TEXT"
        fk = ""
        if spec.parent is not None and parent_keys is not None:
            child = ", ".join(f'"{c.name}"' for c in spec.key[: len(parent_keys)])
            parent = ", ".join(f'"{k}"' for k in parent_keys)
            fk = (
                f',\n    FOREIGN KEY ({child}) REFERENCES "{spec.parent}" ({parent}) '
                "ON DELETE CASCADE"
            )
        table = (
            f'CREATE TABLE IF NOT EXISTS "{spec.name}" (\n'
            "    agentq_msg_id INTEGER PRIMARY KEY,\n"
            f"    {', '.join(cols)},\n"
            f"    payload {payload_type} NOT NULL,\n"
            "    deliver_time INTEGER NOT NULL,\n"
            "    agentq_visible_at INTEGER NOT NULL,\n"
            "    agentq_lease_seq INTEGER NOT NULL DEFAULT 0,\n"
            "    agentq_lease_expiry INTEGER,\n"
            "    agentq_expirations INTEGER NOT NULL DEFAULT 0,\n"
            f"    UNIQUE ({self.key_list}){fk}\n)"
        )
        stmts = [
            table,
            f'CREATE INDEX IF NOT EXISTS "{spec.name}_agentq_visible" '
            f'ON "{spec.name}" (agentq_visible_at, agentq_msg_id)',
        ]
        if spec.ttl is not None:
            stmts.append(
                f'CREATE INDEX IF NOT EXISTS "{spec.name}_agentq_deliver" '
                f'ON "{spec.name}" (deliver_time)'
            )
        return stmts


def create_queue(conn: sqlite3.Connection, spec: QueueSpec) -> None:
    """Create the queue's table and record its spec (inside a write transaction).

    Creating a queue that exists with the same spec does nothing; with another
    spec, under another case of its name, or named like a table that is not a
    queue, it is a :class:`ConfigError`.
    """
    row = conn.execute("SELECT spec FROM agentq_queues WHERE name = ?", (spec.name,)).fetchone()
    wanted = spec_to_json(spec)
    if row is not None:
        if row[0] != wanted:
            raise ConfigError(f"queue {spec.name!r} already exists with a different spec: {row[0]}")
        return
    check_new_queue_name(spec.name, queue_names(conn))
    # Table and index names are case-insensitive in SQLite, and CREATE TABLE IF NOT
    # EXISTS would silently adopt an application's table of the same name.
    clash = conn.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view', 'index') "
        "AND name = ? COLLATE NOCASE",
        (spec.name,),
    ).fetchone()
    if clash is not None:
        raise ConfigError(
            f"queue {spec.name!r} cannot be created: the database already has a "
            f"{clash[0]} {clash[1]!r} that is not an agentq queue; choose another name"
        )
    parent_keys = None
    if spec.parent is not None:
        info = conn.execute(f'PRAGMA table_info("{spec.parent}")').fetchall()
        parent_keys = [r[1] for r in sorted(info, key=lambda r: r[5]) if r[5] > 0]
        if not parent_keys:
            raise ConfigError(
                f"queue {spec.name!r}: parent table {spec.parent!r} does not exist "
                "or has no primary key"
            )
        prefix = [c.name for c in spec.key[: len(parent_keys)]]
        if [p.lower() for p in prefix] != [k.lower() for k in parent_keys]:
            raise ConfigError(
                f"queue {spec.name!r}: its leading key columns {prefix} must be the "
                f"primary key of {spec.parent!r} {parent_keys}"
            )
    for stmt in QueueSQL(spec).ddl(parent_keys):
        conn.execute(stmt)
    conn.execute("INSERT INTO agentq_queues (name, spec) VALUES (?, ?)", (spec.name, wanted))


def load_spec(conn: sqlite3.Connection, name: str) -> QueueSpec | None:
    """The stored spec of queue ``name``, or None if there is no such queue."""
    row = conn.execute("SELECT spec FROM agentq_queues WHERE name = ?", (name,)).fetchone()
    return None if row is None else spec_from_json(row[0])


def queue_names(conn: sqlite3.Connection) -> list[str]:
    """Every queue of the database, by name."""
    rows = conn.execute("SELECT name FROM agentq_queues ORDER BY name").fetchall()
    return [r[0] for r in rows]


def decode_or_raw(spec: QueueSpec, data: bytes | str) -> Any:
    """The payload, or its raw text if it is not valid JSON (written around agentq):
    the consumer then sees a malformed payload and can dead-letter it, instead of
    a lease that fails forever."""
    if isinstance(data, str):  # a TEXT column (written around agentq) hands back str
        data = data.encode("utf-8", errors="surrogatepass")
    try:
        return spec.decode_payload(data)
    except ValueError:
        return bytes(data).decode("utf-8", errors="replace")
