"""Columns of the Spanner records table that hold a name read from the record
(the owner column, the tool column), added after databases were made: how
``agentq init`` fills them for the records already stored, and how a listing
knows it may walk their index.

One :class:`NameColumn` describes each (:mod:`.owner_index`,
:mod:`.tool_index`); the rare-status column, whose value is computed rather
than read, is :mod:`.rare_index`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from agentq.backends.spanner.rare_index import (
    bring_column_forward,
    chunks_where,
    has_column,
    runs_marked,
    set_column,
)

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["NameColumn"]


@dataclass(frozen=True)
class NameColumn:
    """A records-table column holding each record's ``fields[table]`` (for the
    tables of ``tables``; NULL for the others): ``name_of(table, record)`` is
    what a write stores there, ``runs_mark`` the mark of the runs' values filled
    in (the runs joined the column after the tasks)."""

    column: str
    fields: Mapping[str, str]
    tables: tuple[str, ...]
    name_of: Callable[[str, Mapping[str, Any] | str], str | None]
    runs_mark: str

    def has_column(self, backend: SpannerBackend) -> bool | None:
        """Whether the records table has the column (None: no records table)."""
        return has_column(backend, self.column)

    def backfill(self, backend: SpannerBackend, tables: tuple[str, ...] | None = None) -> int:
        """Set the column of the records of ``tables`` (default: all of its
        tables) already stored (after the column was added; the runs', after
        they joined it): each read once in key order, a chunk per query, and
        only the records with a name written. Returns how many were written."""
        d = backend.dialect
        written = 0
        for table in self.tables if tables is None else tables:
            name = self.fields[table]
            field = f"(v::jsonb ->> '{name}')" if d.postgres else f"JSON_VALUE(v, '$.{name}')"
            for found in chunks_where(backend, table, partial(self.name_of, table)):
                set_column(backend, table, found, self.column, field)
                written += len(found)
        return written

    def bring_forward(self, backend: SpannerBackend, had_column: bool) -> None:
        """After ``agentq init``'s DDL: the records stored before the column (if
        it was added just now) get it; the runs stored before they joined it
        get theirs; then the runs' mark (:meth:`runs_filled`)."""
        bring_column_forward(backend, had_column, self.backfill, self.runs_mark)

    def runs_filled(self, backend: SpannerBackend) -> bool:
        """Whether every run's value is in the column, so that a listing of runs
        filtered on it may walk its index: the runs joined it after the column,
        and until ``agentq init`` fills those stored before
        (:meth:`bring_forward`) such a listing filters the runs, as before."""
        return self.has_column(backend) is True and runs_marked(backend, self.runs_mark)
