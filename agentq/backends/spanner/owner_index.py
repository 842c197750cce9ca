"""The tasks' owner column and its indexes on Spanner (as on SQLite and
PostgreSQL: :mod:`agentq.backends.owners`).

A task's record carries its owner (``created_by``) in the records table's
``owner`` column, written with the record in the same mutation (the same
value at every write: an owner never changes), NULL for other tables'
records. Two indexes hold the rows that have one, ``(owner, tbl, k)`` and
``(owner, rare_status, tbl, k)`` (those in a rare status too): an agent's own
listing walks them and reads its page, and the owner's count is counted from
its part of the first (index only, not the records' values).

A durable run's owner (its ``owner``) is kept in the same column and indexes
(:data:`~agentq.backends.owners.OWNER_FIELDS`); the runs joined them after the
tasks, so a database whose runs were stored before has them filled in at
``agentq init`` too (:func:`bring_forward`), and until then an owner's runs
are listed by filtering, as before (:func:`runs_owned`).

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

from agentq.backends.owners import OWNED_TABLES, OWNER_FIELDS, record_owner
from agentq.backends.spanner.ddl import OWNER_COLUMN as COLUMN
from agentq.backends.spanner.rare_index import chunks_where, mark_runs, runs_marked, set_column
from agentq.backends.spanner.rare_index import has_column as _has_column

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["backfill", "bring_forward", "has_column", "runs_owned"]

#: The mark of the runs' owners filled in (the runs joined the column late).
_RUNS_MARK = "runs_owner"


def has_column(backend: SpannerBackend) -> bool | None:
    """Whether the records table has the owner column (None: no records table)."""
    return _has_column(backend, COLUMN)


def backfill(backend: SpannerBackend, tables: tuple[str, ...] = OWNED_TABLES) -> int:
    """Set the column of the records of ``tables`` already stored (after the
    column was added; the runs', after they joined it): each read once in key
    order, a chunk per query, and only the records with an owner written.
    Returns how many were written."""
    d = backend.dialect
    written = 0
    for table in tables:
        name = OWNER_FIELDS[table]
        field = f"(v::jsonb ->> '{name}')" if d.postgres else f"JSON_VALUE(v, '$.{name}')"
        for owned in chunks_where(backend, table, partial(record_owner, table)):
            set_column(backend, table, owned, COLUMN, field)
            written += len(owned)
    return written


def bring_forward(backend: SpannerBackend, had_column: bool) -> None:
    """After ``agentq init``'s DDL: the records stored before the column (if it
    was added just now) get it; the runs stored before they joined it get
    theirs; then the runs' mark (:func:`runs_owned`)."""
    if not had_column:
        backfill(backend)
    elif not runs_marked(backend, _RUNS_MARK):
        backfill(backend, ("runs",))
    else:
        return
    mark_runs(backend, _RUNS_MARK)


def runs_owned(backend: SpannerBackend) -> bool:
    """Whether every run's owner is in the column, so that a listing of an
    owner's runs may walk the owner index: the runs joined it after the
    column, and until ``agentq init`` fills those stored before
    (:func:`bring_forward`) such a listing filters the runs, as before."""
    return has_column(backend) is True and runs_marked(backend, _RUNS_MARK)
