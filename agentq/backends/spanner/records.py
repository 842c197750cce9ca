"""Reads of the runtime's records outside a transaction (strong snapshots)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from google.cloud.spanner_v1 import param_types

from agentq.backends.base import StoredRecord
from agentq.backends.spanner.api_errors import mapped_errors
from agentq.backends.spanner.wire import storable_key

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["get_record", "list_records", "read_records"]


#: Keys per query of :func:`read_records` (one round trip each).
READ_CHUNK = 500


def get_record(backend: SpannerBackend, table: str, key: str) -> dict[str, Any] | None:
    """One record, or None."""
    if not storable_key(key):
        return None  # no record can have this key
    d = backend.dialect
    with (
        mapped_errors(f"reading record {table}/{key}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(
            snap.execute_sql(d.record_select(), params=d.param_dict(["tbl", "k"], [table, key]))
        )
    return None if not rows else dict(json.loads(rows[0][0]))


def read_records(
    backend: SpannerBackend, table: str, keys: Sequence[str]
) -> dict[str, StoredRecord]:
    """Many records with versions (their stored text), in one snapshot and one
    query per :data:`READ_CHUNK` keys (not one round trip per key)."""
    d = backend.dialect
    wanted = [k for k in dict.fromkeys(keys) if storable_key(k)]
    names = ["p1", "p2"] if d.postgres else ["tbl", "keys"]
    types = {names[0]: param_types.STRING, names[1]: param_types.Array(param_types.STRING)}
    out: dict[str, StoredRecord] = {}
    with (
        mapped_errors(f"reading records of {table}", backend.endpoint),
        backend.database.snapshot(multi_use=True) as snap,
    ):
        for start in range(0, len(wanted), READ_CHUNK):
            chunk = wanted[start : start + READ_CHUNK]
            rows = snap.execute_sql(
                d.record_multi_select(),
                params={names[0]: table, names[1]: chunk},
                param_types=types,
            )
            for k, v in rows:
                text = str(v)
                out[str(k)] = StoredRecord(value=dict(json.loads(text)), version=text)
    return {k: out[k] for k in wanted if k in out}


def list_records(
    backend: SpannerBackend,
    table: str,
    prefix: str = "",
    limit: int | None = None,
    after: str = "",
) -> list[tuple[str, dict[str, Any]]]:
    """Records of a table whose key starts with ``prefix``, in key order; with
    ``after``, only keys above it (the next page).

    One query reads one page: the prefix's key range, keys above ``after`` and
    ``LIMIT``, as on SQLite (a page used to re-read the rest of the table)."""
    if not storable_key(prefix) or not storable_key(after):
        return []
    if limit is not None and limit <= 0:
        return []
    upper = _prefix_end(prefix)
    d = backend.dialect
    names = ["tbl", "prefix", "after"] + ([] if upper is None else ["upper"])
    values = [table, prefix, after] + ([] if upper is None else [upper])
    with (
        mapped_errors(f"listing records of {table}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(
            snap.execute_sql(
                d.record_page(upper is not None, limit), params=d.param_dict(names, values)
            )
        )
    out = [
        (str(k), dict(json.loads(v)))
        for k, v in rows
        if str(k).startswith(prefix) and str(k) > after
    ]
    return out if limit is None else out[:limit]


def _prefix_end(prefix: str) -> str | None:
    """The smallest key above every key starting with ``prefix`` (None: no bound).
    Spanner orders STRING by UTF-8 bytes, which is code-point order."""
    if not prefix or ord(prefix[-1]) >= 0x10FFFF:
        return None
    nxt = ord(prefix[-1]) + 1
    if 0xD800 <= nxt <= 0xDFFF:  # not storable in UTF-8: the next code point that is
        nxt = 0xE000
    return prefix[:-1] + chr(nxt)
