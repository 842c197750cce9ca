"""The SQL of a page of records, for the backends whose SQL is alike (SQLite,
PostgreSQL).

A page walks the primary key from its cursor, checking any filter on the rows
it finds. Tasks filtered on rare statuses only (none of
:data:`~agentq.backends.base.COMMON_TASK_STATUSES`: ``GET
/v1/tasks?status=dead``, the overview's counts of unfinished work), and
approvals filtered on open ones, walk the partial index of the ``rare_status``
column (:func:`~agentq.backends.record_filters.rare_status`) instead, one walk per status asked for,
each in key order and stopping at the page's limit, merged by key: the page
reads the records it returns, not the finished ones in between. Tasks filtered
on their owners (``created_by``: an agent's own listing) walk the index of the
owner column likewise (:mod:`agentq.backends.owners`), one walk per owner, or
per owner and rare status when the statuses asked for are all rare. Tasks
filtered on their tools, and runs on their agents, and on neither, walk the
tool column's index (:mod:`agentq.backends.tool_column`), one walk per name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentq.backends.base import RecordFilter
from agentq.backends.owners import OWNER_FIELDS, owner_walks
from agentq.backends.record_filters import check_record_filter, prefix_end, rare_statuses
from agentq.backends.tool_column import TOOL_FIELDS, tool_walks

__all__ = ["PageDialect", "filtered_page"]


@dataclass(frozen=True)
class PageDialect:
    """How a backend's SQL spells a page: its records table, its placeholder, a
    field's string value in a record, false, the clause that names the rare
    statuses' index (if any)."""

    records: str
    mark: str
    field: Callable[[str], str]
    false: str
    indexed_by: str = ""
    #: Whether the records have the owner column and its indexes
    #: (:mod:`agentq.backends.owners`), and the clauses that name them.
    owners: bool = False
    owner_indexed_by: str = ""
    owner_rare_indexed_by: str = ""
    #: Whether the records have the tool column and its index
    #: (:mod:`agentq.backends.tool_column`), and the clause that names it.
    tools: bool = False
    tool_indexed_by: str = ""


def filtered_page(
    d: PageDialect,
    table: str,
    prefix: str,
    after: str,
    *,
    descending: bool,
    where: RecordFilter | None,
    limit: int | None,
) -> tuple[str, list[Any]]:
    """The SQL and parameters of a page of ``table``'s records (an identifier)
    whose keys start with ``prefix``, past ``after`` in key order
    (``descending``: from the highest key down), filtered by ``where``, at most
    ``limit`` rows."""
    m = d.mark
    # Keys with the prefix form one contiguous range of the primary key (and of
    # each status's part of the index), walked forwards or backwards.
    bounds = f" AND k >= {m}"
    bound_params: list[Any] = [prefix]
    upper = prefix_end(prefix)
    if upper is not None:
        bounds += f" AND k < {m}"
        bound_params.append(upper)
    if after:
        bounds += f" AND k {'<' if descending else '>'} {m}"
        bound_params.append(after)
    order = "k DESC" if descending else "k"
    cut = "" if limit is None else f" LIMIT {m}"
    tail_params: list[Any] = [] if limit is None else [limit]
    checked = check_record_filter(where)
    walks = rare_statuses(table, where)
    owners = owner_walks(table, where) if d.owners else None
    # What each walk of an index fixes, in the index's order: the owner and the
    # rare status, the owner, or the rare status (None: the primary key's walk).
    walked: list[str] = []
    if owners is not None:
        walked.append("owner")
    if walks is not None:
        walked.append("rare_status")
    # The tool index only when neither narrower one serves the listing.
    tools = tool_walks(table, where) if d.tools and not walked else None
    if tools is not None:
        walked.append("tool")
    rest: list[str] = []
    params: list[Any] = []
    for name, values, missing in checked:
        if ((walks is not None and name == "status")
                or (owners is not None and name == OWNER_FIELDS[table])
                or (tools is not None and name == TOOL_FIELDS[table])):  # fmt: skip
            continue
        field = d.field(name)
        either = [f"{field} IN ({', '.join([m] * len(values))})"] if values else []
        if missing:
            either.append(f"{field} IS NULL")
        rest.append(f"({' OR '.join(either) or d.false})")
        params += values
    conditions = bounds + "".join(f" AND {cond}" for cond in rest)
    if not walked:
        sql = f"SELECT k, v FROM {d.records} WHERE tbl = {m}{conditions} ORDER BY {order}{cut}"
        return sql, [table, *bound_params, *params, *tail_params]
    keys: list[tuple[str | None, ...]] = [(t,) for t in tools] if tools is not None else [
        (*([o] if owners is not None else []), *([s] if walks is not None else []))
        for o in (owners if owners is not None else [None])
        for s in (walks if walks is not None else [None])
    ]
    if not keys:
        return f"SELECT k, v FROM {d.records} WHERE {d.false}", []  # no value asked for
    # One walk of an index per value (or pair of values) fixed: its order is then
    # key order; a planner that misjudges how many match still walks it.
    hint = {("owner",): d.owner_indexed_by, ("rare_status",): d.indexed_by,
            ("owner", "rare_status"): d.owner_rare_indexed_by,
            ("tool",): d.tool_indexed_by}[tuple(walked)]  # fmt: skip
    way = " DESC" if descending else ""
    fixed = " AND ".join(f"{column} = {m}" for column in walked)
    source = f"{d.records}{hint} WHERE {fixed} AND tbl = '{table}'"
    walk = f" ORDER BY {''.join(f'{c}{way}, ' for c in walked)}tbl{way}, {order}{cut}"
    one = f"SELECT k, v FROM {source}{conditions}{walk}"
    each = [*bound_params, *params, *tail_params]
    if len(keys) == 1:
        return one, [*keys[0], *each]
    selects = [f"SELECT k, v FROM ({one}) AS w{i}" for i in range(len(keys))]
    merged = [p for fixed_values in keys for p in (*fixed_values, *each)]
    return " UNION ALL ".join(selects) + f" ORDER BY {order}{cut}", merged + tail_params
