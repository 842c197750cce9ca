"""The task envelope: what a task message's payload carries.

A message stands for one delivery of a task whose arguments live in the
ledger, stored once: inline in the task's record, or, above the runtime's
threshold, in a row of their own (:mod:`agentq.lifecycle.payloads`), named by
the envelope's ``args_ref``. The envelope (``v`` 2) therefore carries no
arguments and no checkpoint, only what names and routes the delivery; the
executor runs from the ledger. Envelopes of ``v`` 1 (which still carried the
arguments) are read as before.

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
    "ENVELOPE_VERSION",
    "MAX_ENVELOPE_BYTES",
    "TASK_KEY",
    "TaskEnvelope",
    "TaskKind",
    "check_args_size",
    "checked_payload",
    "envelope_of",
    "envelope_payload",
    "task_queue_spec",
]

TaskKind = Literal[
    "action", "escalation", "notify", "expiry", "webhook", "reminder", "auto_reject"
]

#: Hard limit of one task message, and of one task's encoded arguments
#: (Spanner's docs recommend staying under 4 KB: larger arguments are kept out
#: of band, see :mod:`agentq.lifecycle.payloads`).
MAX_ENVELOPE_BYTES = 64 * 1024

#: The envelope version this release sends (1: arguments carried in the message).
ENVELOPE_VERSION: Literal[2] = 2


class TaskEnvelope(BaseModel):
    """One delivery of a task: tool, validated args, attempt, and context."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    v: Literal[1, 2] = ENVELOPE_VERSION
    task_id: str = Field(min_length=1, max_length=128)
    tool: str = Field(min_length=1, max_length=128)
    #: Only in version 1 envelopes; the ledger holds the arguments.
    args: dict[str, Any] | None = None
    #: Where arguments kept out of band are (bytes and digest): informative, the
    #: executor reads the task's own payload row, never one an envelope names.
    args_ref: dict[str, Any] | None = None
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
    :class:`TaskEnvelope` validates it and round-trips it unchanged. Its size
    does not grow with the arguments, so it always fits its queue.
    """
    payload = {
        "v": ENVELOPE_VERSION,
        "task_id": rec["task_id"],
        "tool": rec["tool"],
        "attempt": rec["attempt"],
        "failures": rec.get("failures", 0),
        "throttles": rec.get("throttles", 0),
        "kind": rec.get("kind", "action"),
        "ordering_key": rec.get("ordering_key"),
        "approval_id": rec.get("approval_id"),
        "trace": rec.get("trace") or {},
        "enqueued_at": rec["created_at"],
    }
    ref = rec.get("args_ref")
    if ref is not None:
        payload["args_ref"] = ref
    return payload


def check_args_size(tool: str, size: int) -> None:
    """Refuse arguments whose encoding (``size`` bytes) is over the hard limit."""
    if size > MAX_ENVELOPE_BYTES:
        raise PayloadTooLarge(
            f"task of tool {tool!r}: arguments of {size} bytes exceed the limit of "
            f"{MAX_ENVELOPE_BYTES} bytes; store large data elsewhere and pass a reference"
        )


def checked_payload(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope of ``rec``, checked as its queue will check it when it is sent.

    Every enqueue path calls this before commit, including tasks that are sent
    only later (behind an ordering key, after an approval), so a task that was
    accepted can always be sent: its send can never fail another task's
    completion. (The arguments' own size is checked where they are stored.)
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
    """The envelope of a task's current attempt, rebuilt from its ledger record
    (what :func:`envelope_payload` sends, as a model)."""
    return TaskEnvelope.model_validate(
        {**envelope_payload(rec), "enqueued_at": datetime.fromisoformat(rec["created_at"])}
    )
