"""The queues a database holds, recorded in the runtime's records table.

Spanner's ``INFORMATION_SCHEMA`` documentation does not describe queues, so
``agentq init`` (``apply_ddl``) records each queue's spec in ``agentq_records``
(table ``agentq_queues``) once its DDL succeeded. ``inspect`` and any process
that never declared a queue then find it there.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agentq.backends.spanner.api_errors import mapped_errors
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["CATALOG", "record_specs", "spec_from_text", "spec_text", "stored_specs"]

CATALOG = "agentq_queues"


def spec_text(spec: QueueSpec) -> str:
    """A spec as the JSON text stored for it."""
    return json.dumps(
        {
            "name": spec.name,
            "key": [[c.name, c.type.value] for c in spec.key],
            "payload": spec.payload.value,
            "parent": spec.parent,
            "ttl_seconds": None if spec.ttl is None else spec.ttl.total_seconds(),
            "max_payload_bytes": spec.max_payload_bytes,
        },
        separators=(",", ":"),
    )


def spec_from_text(text: str) -> QueueSpec:
    """Inverse of :func:`spec_text` (validated as any declared spec is)."""
    data: dict[str, Any] = json.loads(text)
    ttl = data.get("ttl_seconds")
    return QueueSpec(
        name=data["name"],
        key=tuple(KeyColumn(n, KeyType(t)) for n, t in data["key"]),
        payload=PayloadType(data["payload"]),
        parent=data.get("parent"),
        ttl=None if ttl is None else timedelta(seconds=ttl),
        max_payload_bytes=int(data["max_payload_bytes"]),
    )


def record_specs(backend: SpannerBackend, specs: Sequence[QueueSpec]) -> None:
    """Record ``specs`` as the database's queues (after their DDL was applied)."""
    if not specs:
        return
    rows = [(CATALOG, spec.name, spec_text(spec)) for spec in specs]
    # insert_or_update is idempotent: a retried commit writes the same rows.
    with (
        mapped_errors("recording the queues", backend.endpoint),
        backend.database.batch() as batch,
    ):
        batch.insert_or_update(backend.dialect.records, columns=("tbl", "k", "v"), values=rows)


def stored_specs(backend: SpannerBackend) -> dict[str, QueueSpec]:
    """Every queue recorded in the database, by name (unreadable entries skipped)."""
    d = backend.dialect
    with (
        mapped_errors("listing the queues", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(
            snap.execute_sql(d.record_scan(), params=d.param_dict(["tbl", "prefix"], [CATALOG, ""]))
        )
    out: dict[str, QueueSpec] = {}
    for _key, text in rows:
        try:
            spec = spec_from_text(str(text))
        except (ValueError, KeyError, TypeError):
            continue  # written by something else; inspect shows the rest
        out[spec.name] = spec
    return out
