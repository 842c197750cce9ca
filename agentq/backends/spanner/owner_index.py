"""The tasks' owner column and its indexes on Spanner (as on SQLite and
PostgreSQL: :mod:`agentq.backends.owners`).

A task's record carries its owner (``created_by``) in the records table's
``owner`` column, written with the record in the same mutation (the same value
at every write: an owner never changes), NULL for other tables' records. Two
indexes hold the rows that have one, ``(owner, tbl, k)`` and ``(owner,
rare_status, tbl, k)`` (those in a rare status too): an agent's own listing
walks them and reads its page, and the owner's count is counted from its part
of the first (index only, not the records' values).

A durable run's owner (its ``owner``) is kept in the same column and indexes
(:data:`~agentq.backends.owners.OWNER_FIELDS`); the runs joined them after the
tasks, so a database whose runs were stored before has them filled in at
``agentq init`` too (``OWNER.bring_forward``), and until then an owner's runs
are listed by filtering, as before (``OWNER.runs_filled``).

A database made by an older agentq lacks the column until ``agentq init`` (or
``ddl=auto``) adds it, fills it for the tasks already there
(``OWNER.backfill``) and builds the indexes. Until then this version lists and
counts an owner's tasks by filtering their JSON, as the older one did. An older
agentq writing a database that has the column leaves it NULL on the tasks it
creates: such a task is missed by owner listings (a listing re-checks each
record's owner, so a wrong row is never listed).
"""

from __future__ import annotations

from agentq.backends.owners import OWNED_TABLES, OWNER_FIELDS, record_owner
from agentq.backends.spanner.ddl import OWNER_COLUMN
from agentq.backends.spanner.name_columns import NameColumn

__all__ = ["OWNER"]

#: The column (its runs' owners filled in at ``agentq init``: the mark ``runs_owner``).
OWNER = NameColumn(OWNER_COLUMN, OWNER_FIELDS, OWNED_TABLES, record_owner, "runs_owner")
