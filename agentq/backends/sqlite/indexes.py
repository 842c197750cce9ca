"""The tasks' index of rare statuses on SQLite (issue 38 item 1).

A task's status is kept in the record's JSON, and also, when it is rare (none
of :data:`~agentq.backends.base.COMMON_TASK_STATUSES`: dead, cancelled,
awaiting approval, waiting, a retry scheduled, an outcome unknown), in the
column ``rare_status`` that the record writes set (NULL otherwise); so do an
open approval's and a durable run's unless it succeeded
(:func:`~agentq.backends.record_filters.rare_status`; NULL in every other
table's records). A partial index of that column holds the few
records an operator looks for among many finished ones. It costs the worker's
writes next to nothing: the column is a value the writer already has (no JSON
parsed in SQL: an index of ``json_extract(v, '$.status')`` cost a claim and a
completion 4-8 µs each, measured by ``tests/bench/record_writes.py``), and a
task that goes queued -> running -> succeeded never enters the index.

The records of the counted tables are counted by :mod:`.totals`.

A database made before the column gets it when it is first opened by this
version (:func:`ensure_rare_status`: the column added, the rare tasks' values
filled in, the index built, the records counted (:mod:`.totals`), in one write
transaction); one made before the durable runs joined the index gets their
rare statuses the same way, once. An older agentq writing to it afterwards would leave the column
unset on its writes.
"""

from __future__ import annotations

import sqlite3

from agentq.backends.base import COMMON_TASK_STATUSES, OPEN_APPROVAL_STATUSES
from agentq.backends.record_filters import RARE_RUN_STATUSES
from agentq.backends.record_pages import PageDialect
from agentq.backends.sqlite import totals
from agentq.backends.sqlite.added_columns import ensure_column

__all__ = ["DIALECT", "RARE_INDEX", "ensure_rare_status"]

#: The name of the tasks' index of rare statuses.
RARE_INDEX = "agentq_records_rare_status"

_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {RARE_INDEX} ON agentq_records (rare_status, tbl, k) "
    "WHERE rare_status IS NOT NULL"
)
_STATUS = "json_extract(v, '$.status')"
_COMMON = ", ".join(f"'{s}'" for s in COMMON_TASK_STATUSES)
_OPEN = ", ".join(f"'{s}'" for s in OPEN_APPROVAL_STATUSES)
_RUNS = ", ".join(f"'{s}'" for s in RARE_RUN_STATUSES)
_FILL = (
    f"UPDATE agentq_records SET rare_status = {_STATUS} "
    "WHERE tbl IN ('tasks', 'approvals', 'runs') AND json_valid(v) "
    f"AND json_type(v, '$.status') = 'text' AND CASE tbl WHEN 'tasks' "
    f"THEN {_STATUS} NOT IN ({_COMMON}) WHEN 'approvals' THEN {_STATUS} IN ({_OPEN}) "
    f"ELSE {_STATUS} IN ({_RUNS}) END"
)
# The runs joined the index after the column: a database that had the column
# gets their rare statuses once, and this mark says so (a row of the records
# table that no record table can name: "#" is in no identifier).
_FILL_RUNS = (
    f"UPDATE agentq_records SET rare_status = {_STATUS} WHERE tbl = 'runs' "
    f"AND json_valid(v) AND json_type(v, '$.status') = 'text' AND {_STATUS} IN ({_RUNS})"
)
# The second mark: the queued runs joined the index after the others.
_RUNS_MARK = "runs_rare_status_2"

#: How a page of records is written here (:mod:`agentq.backends.record_pages`).
DIALECT = PageDialect(
    records="agentq_records", mark="?", field=lambda name: f"json_extract(v, '$.{name}')",
    false="0", indexed_by=f" INDEXED BY {RARE_INDEX}", owners=True,
    owner_indexed_by=" INDEXED BY agentq_records_owner",
    owner_rare_indexed_by=" INDEXED BY agentq_records_owner_rare",
    tools=True, tool_indexed_by=" INDEXED BY agentq_records_tool",
)  # fmt: skip


def ensure_rare_status(conn: sqlite3.Connection) -> None:
    """Give a database made before the rare-status column, before the runs'
    rare statuses or before the counts of :mod:`.totals` the column, its
    values, its index and the counts, in one write transaction (two processes
    opening it at once fill it once); a database that has them is only read."""
    added = ("ALTER TABLE agentq_records ADD COLUMN rare_status TEXT", _FILL)
    if not ensure_column(conn, "rare_status", _RUNS_MARK, added, (_FILL_RUNS,),
                         current=totals.counts_current, then=_index_and_counts):  # fmt: skip
        conn.execute(_INDEX)  # a no-op once built


def _index_and_counts(conn: sqlite3.Connection) -> None:
    conn.execute(_INDEX)
    totals.ensure_counts(conn)
