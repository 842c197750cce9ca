"""The task envelope: what a task message's payload carries.

The envelope is validated when read back; a payload that does not parse is a
corrupt envelope and goes to the dead-letter queue instead of looping.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TASK_KEY", "TaskEnvelope", "TaskKind"]

TaskKind = Literal["action", "escalation", "notify"]


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
