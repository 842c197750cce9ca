"""``CREATE`` statements for the runtime's table and the queues.

Plain Python (no google-cloud-spanner import): ``agentq init --print-ddl``
prints them without the ``spanner`` extra and without credentials.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentq.backends.spanner.dialect import Dialect
from agentq.errors import ConfigError
from agentq.spec import KeyType, PayloadType, QueueSpec

__all__ = [
    "OWNER_COLUMN",
    "RARE_COLUMN",
    "ddl",
    "owner_column_ddl",
    "owner_index_ddl",
    "rare_column_ddl",
    "rare_index_ddl",
    "tool_column_ddl",
    "tool_index_ddl",
]

#: The records table's column of rare statuses (:mod:`.rare_index`).
RARE_COLUMN = "rare_status"
#: The records table's column of the tasks' owners (:mod:`.owner_index`).
OWNER_COLUMN = "owner"
#: The records table's column of the tasks' tools and the runs' agents (:mod:`.tool_index`).
TOOL_COLUMN = "tool"

_GSQL_TYPES = {KeyType.INT: "INT64", KeyType.STR: "STRING(MAX)", KeyType.BYTES: "BYTES(MAX)"}
_PG_TYPES = {KeyType.INT: "bigint", KeyType.STR: "varchar", KeyType.BYTES: "bytea"}


def ddl(specs: Sequence[QueueSpec], *, postgres: bool = False, namespace: str = "") -> list[str]:
    """``CREATE`` statements for the runtime's table and the given queues (their
    names in the database prefixed with ``namespace``)."""
    d = Dialect(postgres, namespace)
    if postgres:
        stmts = [
            f"CREATE TABLE IF NOT EXISTS {d.records} (tbl varchar(128) NOT NULL, k varchar NOT NULL, "
            f"v varchar NOT NULL, {RARE_COLUMN} varchar, {OWNER_COLUMN} varchar, {TOOL_COLUMN} varchar, "
            "PRIMARY KEY (tbl, k))"
        ]
    else:
        stmts = [
            f"CREATE TABLE IF NOT EXISTS {d.records} (tbl STRING(128) NOT NULL, k STRING(MAX) NOT NULL, "
            f"v STRING(MAX) NOT NULL, {RARE_COLUMN} STRING(MAX), {OWNER_COLUMN} STRING(MAX), "
            f"{TOOL_COLUMN} STRING(MAX)) "
            "PRIMARY KEY (tbl, k)"
        ]
    # A table made before a column existed gets it (the CREATE left it as it was).
    stmts += [rare_column_ddl(d), rare_index_ddl(d), owner_column_ddl(d), *owner_index_ddl(d),
              tool_column_ddl(d), tool_index_ddl(d)]  # fmt: skip
    stmts.extend(_queue_ddl(spec, d) for spec in specs)
    return stmts


def rare_column_ddl(d: Dialect) -> str:
    """Add the column to a records table made before it existed (a no-op after)."""
    kind = "varchar" if d.postgres else "STRING(MAX)"
    return f"ALTER TABLE {d.records} ADD COLUMN IF NOT EXISTS {RARE_COLUMN} {kind}"


def rare_index_ddl(d: Dialect) -> str:
    """The index of the rows whose column is set (the others are left out of it)."""
    return (
        f"CREATE INDEX IF NOT EXISTS {d.rare_index} ON {d.records} ({RARE_COLUMN}, tbl, k) "
        f"WHERE {RARE_COLUMN} IS NOT NULL"
    )


def owner_column_ddl(d: Dialect) -> str:
    """Add the owner column to a records table made before it existed (a no-op after)."""
    kind = "varchar" if d.postgres else "STRING(MAX)"
    return f"ALTER TABLE {d.records} ADD COLUMN IF NOT EXISTS {OWNER_COLUMN} {kind}"


def owner_index_ddl(d: Dialect) -> list[str]:
    """The indexes of the tasks that have an owner: by owner, and by owner and
    rare status (of those that have one)."""
    o, r = OWNER_COLUMN, RARE_COLUMN
    return [
        f"CREATE INDEX IF NOT EXISTS {d.owner_index} ON {d.records} ({o}, tbl, k) "
        f"WHERE {o} IS NOT NULL",
        f"CREATE INDEX IF NOT EXISTS {d.owner_rare_index} ON {d.records} ({o}, {r}, tbl, k) "
        f"WHERE {o} IS NOT NULL AND {r} IS NOT NULL",
    ]


def tool_column_ddl(d: Dialect) -> str:
    """Add the tool column to a records table made before it existed (a no-op after)."""
    kind = "varchar" if d.postgres else "STRING(MAX)"
    return f"ALTER TABLE {d.records} ADD COLUMN IF NOT EXISTS {TOOL_COLUMN} {kind}"


def tool_index_ddl(d: Dialect) -> str:
    """The index of the tasks that name a tool and the runs that name an agent, by name."""
    return (
        f"CREATE INDEX IF NOT EXISTS {d.tool_index} ON {d.records} ({TOOL_COLUMN}, tbl, k) "
        f"WHERE {TOOL_COLUMN} IS NOT NULL"
    )


def _ttl_days(spec: QueueSpec) -> int | None:
    if spec.ttl is None:
        return None
    days = spec.ttl.total_seconds() / 86400
    if days != int(days):
        raise ConfigError(
            f"queue {spec.name!r}: Spanner row deletion policies take whole days; "
            f"ttl={spec.ttl} is not"
        )
    return int(days)


def _queue_ddl(spec: QueueSpec, d: Dialect) -> str:
    postgres = d.postgres
    ttl_days = _ttl_days(spec)
    keys = ", ".join(d.ident(c.name) for c in spec.key)
    if postgres:
        cols = [f"{d.ident(c.name)} {_PG_TYPES[c.type]} NOT NULL" for c in spec.key]
        payload = "bytea" if spec.payload is PayloadType.BYTES else "jsonb"
        stmt = (
            f"CREATE QUEUE IF NOT EXISTS {d.queue_ident(spec.name)} ({', '.join(cols)}, "
            f"payload {payload} NOT NULL, PRIMARY KEY ({keys}))"
        )
        if spec.parent:
            stmt += f" INTERLEAVE IN PARENT {d.ident(spec.parent)} ON DELETE CASCADE"
        if ttl_days is not None:
            stmt += f" TTL INTERVAL '{ttl_days} days' ON deliver_time"
        return stmt
    cols = [f"{c.name} {_GSQL_TYPES[c.type]} NOT NULL" for c in spec.key]
    payload = "BYTES(MAX)" if spec.payload is PayloadType.BYTES else "JSON"
    stmt = (
        f"CREATE QUEUE IF NOT EXISTS {d.physical(spec.name)} ({', '.join(cols)}, "
        f"Payload {payload} NOT NULL) PRIMARY KEY ({keys})"
    )
    if spec.parent:
        stmt += f", INTERLEAVE IN PARENT {spec.parent} ON DELETE CASCADE"
    if ttl_days is not None:
        stmt += f", ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL {ttl_days} DAY))"
    return stmt
