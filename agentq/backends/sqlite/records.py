"""The runtime's records (ledger, approvals, ...) in one ``agentq_records`` table.

A record is a JSON object stored under ``(table, key)``. Its version, for
compare-and-swap updates, is the stored JSON text itself: comparing it is one
memcmp in SQLite, and no other writer can make an equal text mean something
else. The write helpers run inside a transaction on its connection; the read
helpers outside one, through :meth:`Database.read`.

Keys come from users (task ids, approval ids, idempotency keys). One that is
not valid UTF-8 text (surrogate-escaped bytes from a command line, say) cannot
be stored, so it names no record: reads find nothing, writes are refused as
:class:`~agentq.errors.InvalidMessage`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from functools import lru_cache, partial
from typing import Any

from agentq.backends.base import EncodedFields, EncodedRecord, RecordFilter, StoredRecord
from agentq.backends.owners import record_owner
from agentq.backends.record_filters import fields_rare_status, record_rare_status
from agentq.backends.record_pages import filtered_page
from agentq.backends.record_text import record_text
from agentq.backends.sqlite.connection import Database
from agentq.backends.sqlite.indexes import DIALECT
from agentq.backends.tool_column import record_tool
from agentq.errors import InvalidMessage
from agentq.jsontext import decode
from agentq.spec import validate_identifier

__all__ = [
    "SCHEMA",
    "delete_record",
    "get_record",
    "get_records",
    "insert_record",
    "list_records",
    "put_record",
    "read_records",
    "read_versions",
    "replace_records",
    "update_records",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentq_records (
    tbl TEXT NOT NULL,
    k TEXT NOT NULL,
    v TEXT NOT NULL,
    rare_status TEXT,
    PRIMARY KEY (tbl, k)
) WITHOUT ROWID;
"""

_IN_CHUNK = 500  # keys per IN (...) list, well under SQLite's bound-parameter limit

_RECORD_TABLES: set[str] = set()


def _record_table(table: str) -> str:
    if table not in _RECORD_TABLES:
        _RECORD_TABLES.add(validate_identifier(table, "record table"))
    return table


def _storable(key: str) -> bool:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unstorable(table: str, key: str, exc: UnicodeEncodeError) -> InvalidMessage:
    return InvalidMessage(
        f"record key {key!r} of {table!r} is not valid UTF-8 text "
        f"({exc.reason} at position {exc.start})"
    )


def get_record(conn: sqlite3.Connection, table: str, key: str) -> dict[str, Any] | None:
    try:
        row = conn.execute(
            "SELECT v FROM agentq_records WHERE tbl = ? AND k = ?", (table, key)
        ).fetchone()
    except UnicodeEncodeError:
        return None  # no record can have this key
    return None if row is None else dict(decode(row[0]))


def get_records(
    conn: sqlite3.Connection, table: str, keys: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The records of ``keys`` that exist, read inside the transaction of ``conn``."""
    out: dict[str, dict[str, Any]] = {}
    wanted = [key for key in dict.fromkeys(keys) if _storable(key)]
    for first in range(0, len(wanted), _IN_CHUNK):
        for key, text in _select_keys(conn, table, wanted[first : first + _IN_CHUNK]):
            out[key] = dict(decode(text))
    return out


def put_record(
    conn: sqlite3.Connection, table: str, key: str, value: Mapping[str, Any] | EncodedRecord
) -> None:
    try:
        conn.execute(
            # An upsert, not INSERT OR REPLACE: a replacing delete fires no trigger,
            # and the totals' triggers must not count a record put again.
            # The owner and the tool are written by the insert only: they never change.
            "INSERT INTO agentq_records (tbl, k, v, rare_status, owner, tool) "
            "VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tbl, k) DO UPDATE SET v = excluded.v, rare_status = excluded.rare_status",
            (_record_table(table), key, record_text(value), record_rare_status(table, value),
             record_owner(table, value), record_tool(table, value)),
        )
    except UnicodeEncodeError as exc:
        raise _unstorable(table, key, exc) from exc


def insert_record(conn: sqlite3.Connection, table: str, key: str, value: Mapping[str, Any]) -> bool:
    try:
        cur = conn.execute(
            "INSERT OR IGNORE INTO agentq_records (tbl, k, v, rare_status, owner, tool) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (_record_table(table), key, record_text(value), record_rare_status(table, value),
             record_owner(table, value), record_tool(table, value)),
        )
    except UnicodeEncodeError as exc:
        raise _unstorable(table, key, exc) from exc
    return cur.rowcount > 0


def delete_record(conn: sqlite3.Connection, table: str, key: str) -> bool:
    if not _storable(key):
        return False
    cur = conn.execute("DELETE FROM agentq_records WHERE tbl = ? AND k = ?", (table, key))
    return cur.rowcount > 0


def replace_records(
    conn: sqlite3.Connection,
    table: str,
    items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord | EncodedFields]],
) -> list[str]:
    """Compare-and-swap each ``(key, version, value)``; return the keys whose
    stored version differed (nothing written for them). :class:`EncodedFields`
    set only those fields (in SQLite's own code: see :func:`update_records`)."""
    _record_table(table)
    execute = conn.execute
    changed = []
    for key, version, value in items:
        if not _storable(key):  # a record never stored cannot be at this version
            changed.append(key)
            continue
        if isinstance(value, EncodedFields):
            sql = _swap_sql(value.names)
            params: tuple[Any, ...] = (*value.values, *_rare_param(table, value), table, key,
                                       version)  # fmt: skip
        else:
            sql = ("UPDATE agentq_records SET v = ?, rare_status = ? "
                   "WHERE tbl = ? AND k = ? AND v = ?")  # fmt: skip
            params = (record_text(value), record_rare_status(table, value), table, key, version)
        if execute(sql, params).rowcount == 0:
            changed.append(key)
    return changed


_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@lru_cache(maxsize=64)
def _update_sql(names: tuple[str, ...]) -> str:
    for name in names:
        if not _FIELD_NAME.match(name):
            raise ValueError(f"record field name {name!r} is not an identifier")
    # json_set changes the named fields in SQLite's own code: the rest of the record
    # (a task's arguments, say) is neither decoded nor encoded again in Python.
    sets = ", ".join(f"'$.{name}', json(?)" for name in names)
    # A status set sets the rare-status column too (:func:`_rare_param`).
    rare = ", rare_status = ?" if "status" in names else ""
    return f"UPDATE agentq_records SET v = json_set(v, {sets}){rare} WHERE tbl = ? AND k = ?"


def _rare_param(table: str, fields: EncodedFields) -> tuple[str | None, ...]:
    """The rare-status column's parameter of :func:`_update_sql` (none if the
    fields set no status)."""
    if "status" not in fields.names:
        return ()
    return (fields_rare_status(table, fields)[1],)


@lru_cache(maxsize=64)
def _swap_sql(names: tuple[str, ...]) -> str:
    """:func:`_update_sql` where the record is still at the version read."""
    return _update_sql(names) + " AND v = ?"


def update_records(
    conn: sqlite3.Connection, table: str, items: Sequence[tuple[str, EncodedFields]]
) -> list[str]:
    """Set top-level fields of existing records, one statement per set of field
    names; returns the keys that have no record (nothing written for them)."""
    _record_table(table)
    missing: list[str] = []
    groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for key, fields in items:
        if not _storable(key):
            missing.append(key)
            continue
        groups.setdefault(fields.names, []).append(
            (*fields.values, *_rare_param(table, fields), table, key)
        )
    for names, rows in groups.items():
        if conn.executemany(_update_sql(names), rows).rowcount == len(rows):
            continue
        for row in rows:  # some had no record (rare): name them
            key = row[-1]
            found = conn.execute(
                "SELECT 1 FROM agentq_records WHERE tbl = ? AND k = ?", (table, key)
            ).fetchone()
            if found is None:
                missing.append(key)
    return missing


def read_records(db: Database, table: str, keys: Sequence[str]) -> dict[str, StoredRecord]:
    out: dict[str, StoredRecord] = {}
    wanted = [key for key in dict.fromkeys(keys) if _storable(key)]
    for first in range(0, len(wanted), _IN_CHUNK):
        rows = db.read(partial(_select_keys, table=table, keys=wanted[first : first + _IN_CHUNK]))
        # Decoded outside the lock: a writer may use the connection meanwhile.
        for key, text in rows:
            out[key] = StoredRecord(value=dict(decode(text)), version=text)
    return out


def read_versions(conn: sqlite3.Connection, table: str, keys: Sequence[str]) -> dict[str, str]:
    """The versions (stored texts, not decoded) of the records of ``keys`` that
    exist, read on ``conn`` (the watcher's own: a check of what readers wait on)."""
    out: dict[str, str] = {}
    wanted = [key for key in dict.fromkeys(keys) if _storable(key)]
    for first in range(0, len(wanted), _IN_CHUNK):
        out.update(_select_keys(conn, table, wanted[first : first + _IN_CHUNK]))
    return out


def _select_keys(conn: sqlite3.Connection, table: str, keys: list[str]) -> list[Any]:
    marks = ", ".join("?" * len(keys))
    return conn.execute(
        f"SELECT k, v FROM agentq_records WHERE tbl = ? AND k IN ({marks})", (table, *keys)
    ).fetchall()


def list_records(
    db: Database,
    table: str,
    prefix: str = "",
    limit: int | None = None,
    after: str = "",
    *,
    descending: bool = False,
    where: RecordFilter | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    if not _storable(prefix) or not _storable(after):
        return []  # no stored key starts with it (or: a cursor no key came from)
    sql, params = filtered_page(DIALECT, _record_table(table), prefix, after,
                                descending=descending, where=where, limit=limit)  # fmt: skip
    rows = db.read(lambda conn: conn.execute(sql, params).fetchall())
    return [(k, dict(decode(v))) for k, v in rows]
