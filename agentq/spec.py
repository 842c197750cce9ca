"""Queue declarations: :class:`QueueSpec` and identifier validation.

A queue is declared once, like Spanner's ``CREATE QUEUE``: ordered key columns
with types, a payload type, an optional parent table it is interleaved in, and
an optional TTL. Every name is validated here, before it can reach any SQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from agentq.errors import ConfigError, InvalidIdentifier, InvalidMessage, PayloadTooLarge
from agentq.jsontext import compact_text, decode

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "Key",
    "KeyColumn",
    "KeyType",
    "PayloadType",
    "QueueSpec",
    "check_new_queue_name",
    "spec_from_json",
    "spec_to_json",
    "validate_identifier",
]

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
# Names agentq and the engines keep for themselves.
_RESERVED_PREFIXES = ("agentq_", "sqlite_", "spanner_")
# Spanner recommends payloads under 4 KB; larger data belongs out of band. The hard
# limit here is generous but finite so a runaway agent cannot bloat the queue.
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024

Key = tuple[int | str | bytes, ...]


def validate_identifier(name: object, what: str = "identifier") -> str:
    """Return ``name`` if it is a safe SQL identifier, else raise InvalidIdentifier."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise InvalidIdentifier(
            f"invalid {what} {name!r}: use a letter followed by up to 127 letters, "
            "digits or underscores"
        )
    if name.lower().startswith(_RESERVED_PREFIXES):
        raise InvalidIdentifier(f"invalid {what} {name!r}: the prefix is reserved")
    return name


def check_new_queue_name(name: str, existing: Iterable[str]) -> None:
    """Refuse a new queue ``name`` that equals an ``existing`` one but for case.

    Identifiers are case-insensitive in Spanner and table names in SQLite, so
    ``tasks`` and ``Tasks`` would be one table: every backend refuses the second.
    """
    folded = name.lower()
    for other in existing:
        if other != name and other.lower() == folded:
            raise ConfigError(
                f"queue {name!r} cannot be created: queue {other!r} exists, and queue "
                "names are case-insensitive (as Spanner identifiers are)"
            )


class KeyType(StrEnum):
    """Type of a key column."""

    INT = "int"
    STR = "str"
    BYTES = "bytes"


class PayloadType(StrEnum):
    """Type of a queue's payload: raw bytes, or a JSON document."""

    BYTES = "bytes"
    JSON = "json"


@dataclass(frozen=True)
class KeyColumn:
    """One primary-key column of a queue."""

    name: str
    type: KeyType

    def __post_init__(self) -> None:
        validate_identifier(self.name, "key column name")
        object.__setattr__(self, "type", KeyType(self.type))


@dataclass(frozen=True)
class QueueSpec:
    """Declaration of a queue.

    ``parent`` names a table the queue is interleaved in (Spanner
    ``INTERLEAVE IN PARENT ... ON DELETE CASCADE``): the queue's leading key
    columns must be the parent's primary key, and deleting a parent row deletes
    its messages. ``ttl`` drops messages whose delivery time is older than it.
    """

    name: str
    key: tuple[KeyColumn, ...]
    payload: PayloadType = PayloadType.BYTES
    parent: str | None = None
    ttl: timedelta | None = None
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES

    def __post_init__(self) -> None:
        validate_identifier(self.name, "queue name")
        key = tuple(col if isinstance(col, KeyColumn) else KeyColumn(*col) for col in self.key)
        if not key:
            raise InvalidIdentifier(f"queue {self.name!r} needs at least one key column")
        names = [col.name.lower() for col in key]
        if len(set(names)) != len(names):
            raise InvalidIdentifier(f"queue {self.name!r} has duplicate key column names")
        if any(n in _SYSTEM_COLUMNS for n in names):
            raise InvalidIdentifier(
                f"queue {self.name!r}: key column names {sorted(_SYSTEM_COLUMNS)} are reserved"
            )
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "payload", PayloadType(self.payload))
        if self.parent is not None:
            validate_identifier(self.parent, "parent table name")
        if self.ttl is not None and self.ttl <= timedelta(0):
            raise ValueError(f"queue {self.name!r}: ttl must be positive")
        if self.max_payload_bytes <= 0:
            raise ValueError(f"queue {self.name!r}: max_payload_bytes must be positive")

    @classmethod
    def simple(cls, name: str, **kwargs: Any) -> QueueSpec:
        """A queue keyed by one string column ``id``."""
        return cls(name, (KeyColumn("id", KeyType.STR),), **kwargs)

    def check_key(self, key: object) -> Key:
        """Validate a key against the key columns and return it as a tuple."""
        parts = key if isinstance(key, tuple | list) else (key,)
        if len(parts) != len(self.key):
            raise InvalidMessage(
                f"queue {self.name!r} expects a key of {len(self.key)} part(s) "
                f"({', '.join(c.name for c in self.key)}), got {len(parts)}"
            )
        for col, value in zip(self.key, parts, strict=True):
            expected = _PYTHON_TYPES[col.type]
            if isinstance(value, bool) or not isinstance(value, expected):
                raise InvalidMessage(
                    f"queue {self.name!r}: key column {col.name!r} must be "
                    f"{col.type.value}, got {type(value).__name__}"
                )
            _check_storable(self.name, col, value)
        return tuple(parts)

    def encode_payload(self, payload: object) -> bytes:
        """Validate a payload and return its stored bytes (UTF-8 JSON for JSON queues)."""
        if self.payload is PayloadType.BYTES:
            if not isinstance(payload, bytes | bytearray | memoryview):
                raise InvalidMessage(
                    f"queue {self.name!r} takes bytes payloads, got {type(payload).__name__}"
                )
            data = bytes(payload)
        else:
            try:
                data = compact_text(payload).encode()
            except (TypeError, ValueError) as exc:
                raise InvalidMessage(f"queue {self.name!r} takes JSON payloads: {exc}") from exc
        if len(data) > self.max_payload_bytes:
            raise PayloadTooLarge(
                f"payload of {len(data)} bytes for queue {self.name!r} exceeds the limit of "
                f"{self.max_payload_bytes} bytes; store large data out of band and send a "
                "reference"
            )
        return data

    def decode_payload(self, data: bytes) -> Any:
        """Inverse of :meth:`encode_payload`."""
        if self.payload is PayloadType.BYTES:
            return bytes(data)
        return decode(data)


def spec_to_json(spec: QueueSpec) -> str:
    """The stored form of ``spec`` (the SQL backends' queues table): also what
    tells an existing queue's spec from another, so its text never changes."""
    return json.dumps(
        {
            "name": spec.name,
            "key": [[c.name, c.type.value] for c in spec.key],
            "payload": spec.payload.value,
            "parent": spec.parent,
            "ttl": spec.ttl.total_seconds() if spec.ttl else None,
            "max_payload_bytes": spec.max_payload_bytes,
        },
        sort_keys=True,
    )


def spec_from_json(text: str) -> QueueSpec:
    """The spec stored as ``text`` by :func:`spec_to_json`."""
    d = json.loads(text)
    return QueueSpec(
        d["name"],
        tuple(KeyColumn(n, KeyType(t)) for n, t in d["key"]),
        payload=PayloadType(d["payload"]),
        parent=d["parent"],
        ttl=timedelta(seconds=d["ttl"]) if d["ttl"] else None,
        max_payload_bytes=d["max_payload_bytes"],
    )


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_storable(queue: str, col: KeyColumn, value: object) -> None:
    """Refuse what no backend can store: SQLite and Spanner keep INT64 integers
    and UTF-8 text (the drivers would raise OverflowError or UnicodeEncodeError)."""
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidMessage(
            f"queue {queue!r}: key column {col.name!r} value {value} does not fit a "
            f"64-bit integer ({_INT64_MIN} to {_INT64_MAX})"
        )
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidMessage(
                f"queue {queue!r}: key column {col.name!r} value {value!r} is not valid "
                f"UTF-8 text ({exc.reason} at position {exc.start})"
            ) from exc


_SYSTEM_COLUMNS = frozenset({"payload", "deliver_time", "delivertime"})
_PYTHON_TYPES: dict[KeyType, type | tuple[type, ...]] = {
    KeyType.INT: int,
    KeyType.STR: str,
    KeyType.BYTES: bytes,
}
