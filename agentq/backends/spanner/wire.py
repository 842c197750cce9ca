"""Values between agentq and the client library's wire format.

BYTES travel base64-encoded in both directions (the client does not do it);
timestamps come back as UTC datetimes or RFC 3339 text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from agentq.errors import InvalidMessage
from agentq.spec import KeyType, PayloadType, QueueSpec

__all__ = [
    "from_wire",
    "payload_bytes",
    "storable_key",
    "unstorable_key",
    "utc",
    "wire_key",
    "wire_payload",
]


def wire_key(spec: QueueSpec, key: Sequence[Any]) -> list[Any]:
    """A checked key as the client sends it (BYTES parts base64-encoded)."""
    return [
        base64.b64encode(v).decode() if c.type is KeyType.BYTES else v
        for c, v in zip(spec.key, key, strict=True)
    ]


def from_wire(value: Any, key_type: KeyType) -> Any:
    """A key part as the client decoded it, back to agentq's type."""
    if key_type is KeyType.BYTES:
        return base64.b64decode(value)
    return value


def wire_payload(spec: QueueSpec, data: bytes) -> Any:
    """An encoded payload as the client sends it: base64 for BYTES, text for JSON."""
    return base64.b64encode(data) if spec.payload is PayloadType.BYTES else data.decode()


def payload_bytes(spec: QueueSpec, payload: Any) -> bytes:
    """A payload column as the client decoded it, back to agentq's encoded bytes."""
    if spec.payload is PayloadType.BYTES:
        return base64.b64decode(payload)
    if isinstance(payload, str | bytes):
        return payload.encode() if isinstance(payload, str) else payload
    serialize = getattr(payload, "serialize", None)
    if callable(serialize):
        # The client's JsonObject is a dict subclass that keeps arrays and scalars
        # outside the dict: json.dumps would write "{}" for [1, 2, 3], "text" or 42.
        # Its serialize() gives the JSON text, or None for a JSON null.
        text = serialize()
        return b"null" if text is None else str(text).encode()
    return json.dumps(payload).encode()


def utc(value: Any) -> datetime:
    """A TIMESTAMP column as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def storable_key(key: str) -> bool:
    """Whether a record key is valid UTF-8 text (one that is not names no record:
    the surrogate-escaped bytes of a mistyped command-line argument, say)."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unstorable_key(table: str, key: str) -> InvalidMessage:
    """The error for writing a record under a key :func:`storable_key` refuses."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = f" ({exc.reason} at position {exc.start})"
    else:
        where = ""
    return InvalidMessage(f"record key {key!r} of {table!r} is not valid UTF-8 text{where}")
