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

from agentq.spec import KeyType, PayloadType, QueueSpec

__all__ = ["from_wire", "payload_bytes", "utc", "wire_key", "wire_payload"]


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
    return json.dumps(payload).encode()


def utc(value: Any) -> datetime:
    """A TIMESTAMP column as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
