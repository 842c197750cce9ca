"""The tasks' tool column and its index on Spanner (as on SQLite and
PostgreSQL: :mod:`agentq.backends.tool_column`).

A task's record carries its tool in the records table's ``tool`` column,
written with the record in the same mutation (the same value at every write: a
task's tool never changes), NULL for other tables' records. The index ``(tool,
tbl, k)`` of the rows that have one is walked by a listing filtered on tools.

A database made by an older agentq lacks the column until ``agentq init`` (or
``ddl=auto``) adds it, fills it for the tasks already there (:func:`backfill`)
and builds the index. Until then this version lists a tool's tasks by filtering
their JSON, as the older one did. An older agentq writing a database that has
the column leaves it NULL on the tasks it creates: such a task is missed by
tool listings (a listing re-checks each record's tool, so a wrong row is never
listed).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from agentq.backends.spanner.ddl import TOOL_COLUMN as COLUMN
from agentq.backends.spanner.rare_index import chunks_where, set_column
from agentq.backends.spanner.rare_index import has_column as _has_column
from agentq.backends.tool_column import TOOL_FIELD, TOOL_TABLES, record_tool

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["backfill", "has_column"]


def has_column(backend: SpannerBackend) -> bool | None:
    """Whether the records table has the tool column (None: no records table)."""
    return _has_column(backend, COLUMN)


def backfill(backend: SpannerBackend) -> int:
    """Set the column of the tasks already stored (after the column was added):
    read once in key order, a chunk per query, and only the tasks with a tool
    written. Returns how many were written."""
    d = backend.dialect
    field = f"(v::jsonb ->> '{TOOL_FIELD}')" if d.postgres else f"JSON_VALUE(v, '$.{TOOL_FIELD}')"
    written = 0
    for table in TOOL_TABLES:
        for found in chunks_where(backend, table, partial(record_tool, table)):
            set_column(backend, table, found, COLUMN, field)
            written += len(found)
    return written
