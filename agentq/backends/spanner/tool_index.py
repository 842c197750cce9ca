"""The tool column and its index on Spanner (as on SQLite and PostgreSQL:
:mod:`agentq.backends.tool_column`): a task's tool, and a durable run's agent.

A task's or run's record carries its name in the records table's ``tool``
column, written with the record in the same mutation (the same value at every
write: a task's tool and a run's agent never change), NULL for other tables'
records. The index ``(tool, tbl, k)`` of the rows that have one is walked by a
listing filtered on tools (or on agents, for runs).

A database made by an older agentq lacks the column until ``agentq init`` (or
``ddl=auto``) adds it, fills it for the records already there
(``TOOL.backfill``) and builds the index. Until then this version lists a
tool's tasks by filtering their JSON, as the older one did. The runs joined the
column after the tasks, so a database whose runs were stored before has their
agents filled in at ``agentq init`` too (``TOOL.bring_forward``), and until
then an agent's runs are listed by filtering, as before (``TOOL.runs_filled``).
An older agentq writing a database that has the column leaves it NULL on the
records it creates: such a record is missed by these listings (a listing
re-checks each record's name, so a wrong row is never listed).
"""

from __future__ import annotations

from agentq.backends.spanner.ddl import TOOL_COLUMN
from agentq.backends.spanner.name_columns import NameColumn
from agentq.backends.tool_column import TOOL_FIELDS, TOOL_TABLES, record_tool

__all__ = ["TOOL"]

#: The column (its runs' agents filled in at ``agentq init``: the mark ``runs_agent``).
TOOL = NameColumn(TOOL_COLUMN, TOOL_FIELDS, TOOL_TABLES, record_tool, "runs_agent")
