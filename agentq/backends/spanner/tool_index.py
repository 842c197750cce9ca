"""The tool column and its index on Spanner (as on SQLite and PostgreSQL:
:mod:`agentq.backends.tool_column`): a task's tool, and a durable run's agent.

A task's or run's record carries its name in the records table's ``tool``
column, written with the record in the same mutation (the same value at every
write: a task's tool and a run's agent never change), NULL for other tables'
records. The index ``(tool, tbl, k)`` of the rows that have one is walked by a
listing filtered on tools (or on agents, for runs).

A database made by an older agentq lacks the column until ``agentq init`` (or
``ddl=auto``) adds it, fills it for the records already there
(:func:`backfill`) and builds the index. Until then this version lists a
tool's tasks by filtering their JSON, as the older one did. The runs joined
the column after the tasks, so a database whose runs were stored before has
their agents filled in at ``agentq init`` too (:func:`bring_forward`), and
until then an agent's runs are listed by filtering, as before
(:func:`runs_named`). An older agentq writing a database that has the column
leaves it NULL on the records it creates: such a record is missed by these
listings (a listing re-checks each record's name, so a wrong row is never
listed).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from agentq.backends.spanner.ddl import TOOL_COLUMN as COLUMN
from agentq.backends.spanner.rare_index import chunks_where, mark_runs, runs_marked, set_column
from agentq.backends.spanner.rare_index import has_column as _has_column
from agentq.backends.tool_column import TOOL_FIELDS, TOOL_TABLES, record_tool

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["backfill", "bring_forward", "has_column", "runs_named"]

#: The mark of the runs' agents filled in (the runs joined the column late).
_RUNS_MARK = "runs_agent"


def has_column(backend: SpannerBackend) -> bool | None:
    """Whether the records table has the tool column (None: no records table)."""
    return _has_column(backend, COLUMN)


def backfill(backend: SpannerBackend, tables: tuple[str, ...] = TOOL_TABLES) -> int:
    """Set the column of the records of ``tables`` already stored (after the
    column was added; the runs', after they joined it): each read once in key
    order, a chunk per query, and only the records with a name written.
    Returns how many were written."""
    d = backend.dialect
    written = 0
    for table in tables:
        name = TOOL_FIELDS[table]
        field = f"(v::jsonb ->> '{name}')" if d.postgres else f"JSON_VALUE(v, '$.{name}')"
        for found in chunks_where(backend, table, partial(record_tool, table)):
            set_column(backend, table, found, COLUMN, field)
            written += len(found)
    return written


def bring_forward(backend: SpannerBackend, had_column: bool) -> None:
    """After ``agentq init``'s DDL: the records stored before the column (if it
    was added just now) get it; the runs stored before they joined it get
    theirs; then the runs' mark (:func:`runs_named`)."""
    if not had_column:
        backfill(backend)
    elif not runs_marked(backend, _RUNS_MARK):
        backfill(backend, ("runs",))
    else:
        return
    mark_runs(backend, _RUNS_MARK)


def runs_named(backend: SpannerBackend) -> bool:
    """Whether every run's agent is in the column, so that a listing of an
    agent's runs may walk the tool index: the runs joined it after the column,
    and until ``agentq init`` fills those stored before (:func:`bring_forward`)
    such a listing filters the runs, as before."""
    return has_column(backend) is True and runs_marked(backend, _RUNS_MARK)
