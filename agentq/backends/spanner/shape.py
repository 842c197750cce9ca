"""Does an existing queue have the shape its spec asks for? (issue 29, defect 5)

The queue DDL is ``CREATE QUEUE IF NOT EXISTS``: beside a queue of the same name
and another shape (other key columns or types, another payload type) it does
nothing, yet the catalog then recorded the new spec and every send failed
later. The existing queue's primary key (columns in order, with types) and
payload type are read from ``INFORMATION_SCHEMA`` and compared with the spec at
``init`` (:meth:`~.backend.SpannerBackend.apply_ddl`) and when a worker starts;
a mismatch is a :class:`~agentq.errors.ConfigError` naming both shapes.

A queue that ``INFORMATION_SCHEMA`` does not show (not created yet, or a
Spanner that does not list queues there: a question only a real instance
settles) is not compared.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agentq.backends.spanner.api_errors import API_ERRORS
from agentq.errors import ConfigError
from agentq.spec import KeyType, PayloadType, QueueSpec

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["check_shape", "existing_shape", "expected_shape"]

log = logging.getLogger("agentq.backends.spanner")

#: (key types, payload types) as INFORMATION_SCHEMA's SPANNER_TYPE spells them.
_GSQL = (
    {KeyType.INT: "INT64", KeyType.STR: "STRING(MAX)", KeyType.BYTES: "BYTES(MAX)"},
    {PayloadType.BYTES: "BYTES(MAX)", PayloadType.JSON: "JSON"},
)
_PG = (
    {KeyType.INT: "bigint", KeyType.STR: "character varying", KeyType.BYTES: "bytea"},
    {PayloadType.BYTES: "bytea", PayloadType.JSON: "jsonb"},
)

_GSQL_SQL = (
    "SELECT c.COLUMN_NAME, c.SPANNER_TYPE, ic.ORDINAL_POSITION "
    "FROM INFORMATION_SCHEMA.COLUMNS c LEFT JOIN INFORMATION_SCHEMA.INDEX_COLUMNS ic "
    "ON ic.TABLE_SCHEMA = c.TABLE_SCHEMA AND ic.TABLE_NAME = c.TABLE_NAME "
    "AND ic.COLUMN_NAME = c.COLUMN_NAME AND ic.INDEX_NAME = 'PRIMARY_KEY' "
    "WHERE c.TABLE_SCHEMA = '' AND c.TABLE_NAME = @name"
)
_PG_SQL = (
    "SELECT c.column_name, c.spanner_type, ic.ordinal_position "
    "FROM information_schema.columns c LEFT JOIN information_schema.index_columns ic "
    "ON ic.table_schema = c.table_schema AND ic.table_name = c.table_name "
    "AND ic.column_name = c.column_name AND ic.index_name = 'PRIMARY_KEY' "
    "WHERE c.table_schema = 'public' AND c.table_name = $1"
)


def _describe(keys: list[tuple[str, str]], payload: str | None) -> str:
    cols = ", ".join(f"{name} {type_}" for name, type_ in keys)
    return f"key ({cols}), payload {payload or 'none'}"


def expected_shape(spec: QueueSpec, postgres: bool) -> str:
    """The shape ``spec`` asks for, as :func:`existing_shape` reports one."""
    keys, payloads = _PG if postgres else _GSQL
    name = str.lower if postgres else str
    return _describe([(name(c.name), keys[c.type]) for c in spec.key], payloads[spec.payload])


def existing_shape(backend: SpannerBackend, spec: QueueSpec) -> str | None:
    """The existing queue's shape (None: INFORMATION_SCHEMA does not show it, or
    could not be read)."""
    d = backend.dialect
    try:
        with backend.database.snapshot() as snap:
            rows = list(
                snap.execute_sql(
                    _PG_SQL if d.postgres else _GSQL_SQL,
                    params=d.param_dict(["name"], [d.queue_ident(spec.name)]),
                )
            )
    except API_ERRORS as exc:
        # A role that may not read the schema: the check cannot run, and is not
        # worth refusing to start for (sends would still fail, by name).
        log.warning("cannot read the shape of queue %r: %s", spec.name, exc)
        return None
    if not rows:
        return None
    keys = sorted((int(pos), str(col), str(t)) for col, t, pos in rows if pos is not None)
    payload = next((str(t) for col, t, _ in rows if str(col).lower() == "payload"), None)
    return _describe([(col, t) for _, col, t in keys], payload)


def check_shape(backend: SpannerBackend, spec: QueueSpec) -> None:
    """Raise :class:`ConfigError` if the existing queue has another shape."""
    have = existing_shape(backend, spec)
    want = expected_shape(spec, backend.dialect.postgres)
    if have is not None and have != want:
        raise ConfigError(
            f"queue {spec.name!r} already exists with another shape: the database has "
            f"{have}; this project's spec needs {want}. CREATE QUEUE IF NOT EXISTS leaves "
            "the existing queue as it is: drop or rename one of them"
        )
