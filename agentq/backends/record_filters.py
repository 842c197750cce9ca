"""What listings filter and count records by: the filter of
:meth:`~agentq.backends.base.Backend.list_records`, key ranges, the tasks' and
approvals' rare statuses (the status index), and the counted tables."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from agentq.backends.record_text import _UNSAID, EncodedFields, EncodedRecord, _loads
from agentq.jsontext import compact_text

__all__ = [
    "COMMON_TASK_STATUSES",
    "COUNTED_TABLES",
    "OPEN_APPROVAL_STATUSES",
    "RARE_RUN_STATUSES",
    "RARE_TABLES",
    "RecordFilter",
    "check_counted",
    "check_record_filter",
    "fields_rare_status",
    "prefix_end",
    "rare_status",
    "rare_statuses",
    "record_matches",
    "record_rare_status",
]


#: :meth:`Backend.list_records`' filter: field name → the values it may hold
#: (strings; ``None``: missing or null). Field names are identifiers.
RecordFilter = Mapping[str, Collection[str | None]]

#: The statuses every task passes through (enqueued, claimed, done). The tasks'
#: status index holds the others (rare: dead, cancelled, awaiting approval,
#: waiting, a retry scheduled, an outcome unknown), so that a worker's status
#: changes never touch an index (on PostgreSQL they stay HOT updates), while a
#: listing of tasks filtered on rare statuses only (:func:`rare_statuses`)
#: reads the records it returns, not the finished ones in between.
COMMON_TASK_STATUSES = ("queued", "running", "succeeded")
#: The approvals' open statuses, which the same index holds for the approvals
#: table (the inbox: pending among many decided).
OPEN_APPROVAL_STATUSES = ("escalated", "pending")
#: The durable runs' statuses the same index holds for the runs table: every
#: one but success. A run in progress (queued, or running: its turn held by a
#: worker, stored as queued), parked (awaiting its tool calls or an approval)
#: or ended other than by succeeding is one among many that succeeded, and the
#: console lists each kind. Unlike a task's, a run's status changes once per
#: model turn, not per tool call: the index entry its start writes and its
#: success removes costs next to nothing beside the turn (queued -> queued, a
#: run's next turn, leaves it as it is).
RARE_RUN_STATUSES = ("awaiting_approval", "awaiting_tools", "cancelled", "failed", "queued")
#: The record tables whose records the index of rare statuses holds.
RARE_TABLES = ("approvals", "runs", "tasks")
#: The record tables whose records :meth:`Backend.record_count` counts.
COUNTED_TABLES = ("dead_letters", "tasks")


_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def prefix_end(prefix: str) -> str | None:
    """The smallest key above every key starting with ``prefix`` (None: no upper
    bound), in code-point order (SQLite's and PostgreSQL's ``COLLATE "C"`` text,
    Spanner's UTF-8 bytes): the prefix's last character plus one, skipping the
    surrogates no encoding stores. A last character of U+10FFFF has no successor:
    the bound is then the one of the prefix without it (nothing sorts between)."""
    prefix = prefix.rstrip("\U0010ffff")
    if not prefix:
        return None
    nxt = ord(prefix[-1]) + 1
    if 0xD800 <= nxt <= 0xDFFF:
        nxt = 0xE000
    return prefix[:-1] + chr(nxt)


def check_record_filter(where: RecordFilter | None) -> list[tuple[str, list[str], bool]]:
    """``where`` as ``(field, string values, whether missing/null matches)``, in a
    fixed order; a field name that is not an identifier (it is spliced into a JSON
    path) or a value that is not a string raises ValueError."""
    out = []
    for name in sorted(where or {}):
        if not _FIELD.match(name):
            raise ValueError(f"record field name {name!r} is not an identifier")
        values = list((where or {})[name])
        strings = sorted({v for v in values if v is not None})
        if any(not isinstance(v, str) for v in strings):
            raise ValueError(f"values of record field {name!r} must be strings or None")
        out.append((name, strings, None in values))
    return out


def record_matches(value: Mapping[str, Any], where: RecordFilter | None) -> bool:
    """Whether a record (decoded) passes ``where`` as a backend's listing checks
    it: each field's value, as text (a string as it is, anything else as its
    JSON text), is one of the strings asked for, or the field is missing or
    null and ``None`` is asked for."""
    for name, strings, missing in check_record_filter(where):
        field = value.get(name)
        if field is None:
            if not missing:
                return False
        elif (field if isinstance(field, str) else compact_text(field)) not in strings:
            return False
    return True


def rare_statuses(table: str, where: RecordFilter | None) -> list[str] | None:
    """The statuses a listing of ``table`` filtered by ``where`` walks the
    index of rare statuses for (sorted), or None if it walks the primary key:
    only records of :data:`RARE_TABLES` filtered on statuses that are all rare
    (:func:`rare_status`; not a missing status) use the index."""
    if table not in RARE_TABLES or not where or "status" not in where:
        return None
    wanted = list(where["status"])
    if any(rare_status(table, v) is None for v in wanted):
        return None
    return sorted(set(wanted))  # type: ignore[arg-type]


def rare_status(table: str, status: Any) -> str | None:
    """What a record of ``table`` with ``status`` keeps in its rare-status
    column: the status of a task whose status is a string and not one of
    :data:`COMMON_TASK_STATUSES`, of an approval in one of
    :data:`OPEN_APPROVAL_STATUSES`, or of a run in one of
    :data:`RARE_RUN_STATUSES`; else None (not in the index)."""
    if not isinstance(status, str):
        return None
    if table == "tasks":
        return None if status in COMMON_TASK_STATUSES else status
    if table == "approvals":
        return status if status in OPEN_APPROVAL_STATUSES else None
    if table == "runs":
        return status if status in RARE_RUN_STATUSES else None
    return None


def record_rare_status(table: str, value: Mapping[str, Any] | str) -> str | None:
    """:func:`rare_status` of a whole record (a mapping, or its stored text, which
    is parsed only for a table of :data:`RARE_TABLES`)."""
    if table not in RARE_TABLES:
        return None
    if isinstance(value, EncodedRecord) and value.status is not _UNSAID:
        return rare_status(table, value.status)
    if not isinstance(value, Mapping):
        value = _loads(value)
        if not isinstance(value, Mapping):
            return None
    return rare_status(table, value.get("status"))


def fields_rare_status(table: str, fields: EncodedFields) -> tuple[bool, str | None]:
    """Whether ``fields`` set a task's status, and :func:`rare_status` of the
    status they set."""
    if table not in RARE_TABLES or "status" not in fields.names:
        return False, None
    text = fields.values[fields.names.index("status")]
    return True, rare_status(table, _loads(text))


def check_counted(table: str) -> None:
    """ValueError unless :meth:`Backend.record_count` counts ``table``."""
    if table not in COUNTED_TABLES:
        raise ValueError(f"records of {table!r} are not counted (only {', '.join(COUNTED_TABLES)})")
