"""The task envelope: what a task message's payload carries.

The envelope is validated when read back; a payload that does not parse is a
corrupt envelope and goes to the dead-letter queue instead of looping.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentq.errors import InvalidMessage, PayloadTooLarge
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec

__all__ = [
    "MAX_ENVELOPE_BYTES",
    "TASK_KEY",
    "TaskEnvelope",
    "TaskKind",
    "checked_payload",
    "envelope_of",
    "envelope_payload",
    "task_queue_spec",
]

TaskKind = Literal[
    "action", "escalation", "notify", "expiry", "webhook", "reminder", "auto_reject"
]

#: Hard limit of one task message (Spanner's docs recommend staying under 4 KB).
MAX_ENVELOPE_BYTES = 64 * 1024


class TaskEnvelope(BaseModel):
    """One delivery of a task: tool, validated args, attempt, and context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    task_id: str = Field(min_length=1, max_length=128)
    tool: str = Field(min_length=1, max_length=128)
    args: dict[str, Any]
    attempt: int = Field(ge=1)
    failures: int = Field(default=0, ge=0)
    throttles: int = Field(default=0, ge=0)
    kind: TaskKind = "action"
    ordering_key: str | None = None
    approval_id: str | None = None
    checkpoint: dict[str, Any] | None = None
    trace: dict[str, str] = Field(default_factory=dict)
    enqueued_at: datetime

    def message_key(self) -> tuple[str, int]:
        """The queue key of this delivery: a retry is a new key, so a stale
        worker's ack of the old one fails."""
        return (self.task_id, self.attempt)


#: Key columns of every task queue: (task_id, attempt).
TASK_KEY = (("task_id", "str"), ("attempt", "int"))


def task_queue_spec(name: str) -> QueueSpec:
    """Spec of a task queue: key (task_id, attempt), JSON envelope payload."""
    return QueueSpec(
        name,
        (KeyColumn("task_id", KeyType.STR), KeyColumn("attempt", KeyType.INT)),
        payload=PayloadType.JSON,
        max_payload_bytes=MAX_ENVELOPE_BYTES,
    )


def envelope_payload(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON envelope of a task's current attempt, built from its ledger record.

    Built directly (it is on the hot path of every enqueue); a test checks that
    :class:`TaskEnvelope` validates it and round-trips it unchanged.
    """
    return {
        "v": 1,
        "task_id": rec["task_id"],
        "tool": rec["tool"],
        "args": rec["args"],
        "attempt": rec["attempt"],
        "failures": rec.get("failures", 0),
        "throttles": rec.get("throttles", 0),
        "kind": rec.get("kind", "action"),
        "ordering_key": rec.get("ordering_key"),
        "approval_id": rec.get("approval_id"),
        "checkpoint": rec.get("checkpoint"),
        "trace": rec.get("trace") or {},
        "enqueued_at": rec["created_at"],
    }


def checked_payload(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope of ``rec``, checked as its queue will check it when it is sent.

    Every enqueue path calls this before commit, including tasks that are sent
    only later (behind an ordering key, after an approval), so a task that was
    accepted can always be sent: its send can never fail another task's
    completion.
    """
    payload = envelope_payload(rec)
    try:
        task_queue_spec(str(rec["queue"])).encode_payload(payload)
    except PayloadTooLarge as exc:
        raise PayloadTooLarge(f"task of tool {rec['tool']!r}: {exc}") from exc
    except InvalidMessage as exc:
        raise InvalidMessage(f"task of tool {rec['tool']!r}: {exc}") from exc
    return payload


def envelope_of(rec: Mapping[str, Any]) -> TaskEnvelope:
    """The envelope of a task's current attempt, rebuilt from its ledger record."""
    return TaskEnvelope.model_validate(
        {**envelope_payload(rec), "enqueued_at": datetime.fromisoformat(rec["created_at"])}
    )
