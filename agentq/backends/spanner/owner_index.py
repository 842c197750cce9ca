"""The tasks' owner column and its indexes on Spanner (as on SQLite and
PostgreSQL: :mod:`agentq.backends.owners`).

A task's record carries its owner (``created_by``) in the records table's
``owner`` column, written with the record in the same mutation (the same
value at every write: an owner never changes), NULL for other tables'
records. Two indexes hold the rows that have one, ``(owner, tbl, k)`` and
``(owner, rare_status, tbl, k)`` (those in a rare status too): an agent's own
listing walks them and reads its page, and the owner's count is counted from
its part of the first (index only, not the records' values).

A database made by an older agentq lacks the column until ``agentq init`` (or
``ddl=auto``) adds it, fills it for the tasks already there (:func:`backfill`)
and builds the indexes. Until then this version lists and counts an owner's
tasks by filtering their JSON, as the older one did. An older agentq writing a
database that has the column leaves it NULL on the tasks it creates: such a
task is missed by owner listings (a listing re-checks each record's owner, so
a wrong row is never listed).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from agentq.backends.owners import OWNED_TABLES, OWNER_FIELD, record_owner
from agentq.backends.spanner.ddl import OWNER_COLUMN as COLUMN
from agentq.backends.spanner.rare_index import chunks_where, set_column
from agentq.backends.spanner.rare_index import has_column as _has_column

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["backfill", "has_column"]

def has_column(backend: SpannerBackend) -> bool | None:
    """Whether the records table has the owner column (None: no records table)."""
    return _has_column(backend, COLUMN)


def backfill(backend: SpannerBackend) -> int:
    """Set the column of the tasks already stored (after the column was added):
    read once in key order, a chunk per query, and only the tasks with an owner
    written. Returns how many were written."""
    d = backend.dialect
    field = f"(v::jsonb ->> '{OWNER_FIELD}')" if d.postgres else f"JSON_VALUE(v, '$.{OWNER_FIELD}')"
    written = 0
    for table in OWNED_TABLES:
        for owned in chunks_where(backend, table, partial(record_owner, table)):
            set_column(backend, table, owned, COLUMN, field)
            written += len(owned)
    return written
