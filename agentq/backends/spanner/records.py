"""Reads of the runtime's records outside a transaction (strong snapshots)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentq.backends.base import StoredRecord

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["get_record", "list_records", "read_records"]


def get_record(backend: SpannerBackend, table: str, key: str) -> dict[str, Any] | None:
    """One record, or None."""
    d = backend.dialect
    with backend.database.snapshot() as snap:
        rows = list(
            snap.execute_sql(d.record_select(), params=d.param_dict(["tbl", "k"], [table, key]))
        )
    return None if not rows else dict(json.loads(rows[0][0]))


def read_records(
    backend: SpannerBackend, table: str, keys: Sequence[str]
) -> dict[str, StoredRecord]:
    """Many records with versions (their stored text), in one snapshot."""
    d = backend.dialect
    out: dict[str, StoredRecord] = {}
    with backend.database.snapshot(multi_use=True) as snap:
        for key in dict.fromkeys(keys):
            rows = list(
                snap.execute_sql(d.record_select(), params=d.param_dict(["tbl", "k"], [table, key]))
            )
            if rows:
                text = str(rows[0][0])
                out[key] = StoredRecord(value=dict(json.loads(text)), version=text)
    return out


def list_records(
    backend: SpannerBackend, table: str, prefix: str = "", limit: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Records of a table whose key starts with ``prefix``, in key order."""
    d = backend.dialect
    with backend.database.snapshot() as snap:
        rows = list(
            snap.execute_sql(
                d.record_scan(), params=d.param_dict(["tbl", "prefix"], [table, prefix])
            )
        )
    out = [(str(k), dict(json.loads(v))) for k, v in rows if str(k).startswith(prefix)]
    return out if limit is None else out[:limit]
