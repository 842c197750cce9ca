"""The rows of the records table (:mod:`.records`) as Python builds them: which
keys the table can hold, a record's stored text, fields merged into a stored
text, and the rows and statement of a compare-and-swap of a set.

A key PostgreSQL cannot store as text (not valid UTF-8, or holding a NUL
character) names no record (:func:`storable`); a write of one is refused
(:func:`check_storable`). Fields are merged here, into the stored text, not in
the server as ``jsonb`` (see :mod:`.records` for why).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentq.backends.record_filters import rare_status, record_rare_status
from agentq.backends.record_text import EncodedFields, EncodedRecord, record_text
from agentq.errors import InvalidMessage
from agentq.jsontext import decode
from agentq.spec import validate_identifier

__all__ = [
    "SwapRow", "check_storable", "merged", "record_table", "storable", "stored_text",
    "swap_rows", "swap_statement",
]  # fmt: skip

_RECORD_TABLES: set[str] = set()
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def record_table(table: str) -> str:
    """``table``, checked once to be a plain identifier (a record table's name)."""
    if table not in _RECORD_TABLES:
        _RECORD_TABLES.add(validate_identifier(table, "record table"))
    return table


def storable(key: str) -> bool:
    """Whether ``key`` can name a stored record (text PostgreSQL can hold)."""
    if "\x00" in key:
        return False
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_storable(table: str, key: str) -> None:
    """Refuse a write under ``key`` that :func:`storable` says no record can have."""
    if "\x00" in key:
        raise InvalidMessage(f"record key {key!r} of {table!r} holds a NUL character")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(
            f"record key {key!r} of {table!r} is not valid UTF-8 text "
            f"({exc.reason} at position {exc.start})"
        ) from exc


def stored_text(value: Mapping[str, Any] | EncodedRecord) -> str:
    """The text a record is stored as."""
    text = record_text(value)
    # JSON escapes a NUL as \u0000, which text can hold; nothing else to check.
    return text


def merged(table: str, text: str, fields: EncodedFields) -> tuple[str, str | None]:
    """The record ``text`` with ``fields`` set (the other fields as they were),
    and its rare status (:func:`~agentq.backends.record_filters.rare_status`)."""
    for name in fields.names:
        if not _FIELD_NAME.match(name):
            raise ValueError(f"record field name {name!r} is not an identifier")
    record = decode(text)
    for name, value in zip(fields.names, fields.values, strict=True):
        record[name] = decode(value)
    return record_text(record), rare_status(table, record.get("status"))


#: A compare-and-swap of one record: key, version (the stored text), new text,
#: and the new text's rare status (:func:`~agentq.backends.record_filters.rare_status`).
SwapRow = tuple[str, str, str, str | None]


def swap_rows(
    table: str,
    items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord | EncodedFields]],
) -> tuple[list[str], list[SwapRow]]:
    """Of the swaps ``(key, version, value)``, the keys that cannot be swapped
    (no record can be at that version), and the rows of the rest."""
    record_table(table)
    changed: list[str] = []
    rows: list[SwapRow] = []
    for key, version, value in items:
        if not storable(key):
            changed.append(key)
            continue
        if isinstance(value, EncodedFields):
            try:
                text, rare = merged(table, version, value)  # the version is the stored text
            except json.JSONDecodeError:  # not a version read from this table
                changed.append(key)
                continue
        else:
            text, rare = stored_text(value), record_rare_status(table, value)
        rows.append((key, version, text, rare))
    return changed, rows


def swap_statement(
    records: str, table: str, rows: Sequence[SwapRow], returning: str
) -> tuple[str, Any]:
    """One ``UPDATE`` of the records table ``records`` (qualified) that swaps
    ``rows`` (each key once) where each is still at its version, ``RETURNING``
    ``returning`` of each row swapped."""
    return (
        f"UPDATE {records} AS r SET v = x.v, rare_status = x.rare "
        "FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[]) "
        "AS x(k, old, v, rare) "
        f"WHERE r.tbl = %s AND r.k = x.k AND r.v = x.old RETURNING {returning}",
        (*(list(col) for col in zip(*rows, strict=True)), table),
    )
