"""Approvals and escalations.

Requesting approval records the pending approval, the action task (status
``awaiting_approval``, no queue message yet) and schedules an escalation
message, all in the decision's transaction. Approving commits the decision,
deletes the escalation message and sends the action, in one transaction; if
the escalation fires first, its handler escalates and the approval records it,
and a later approval still works. A race between the two leaves one outcome:
the approval's delete makes the running escalation's completion ack fail, so
nothing of that escalation is recorded.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["ApprovalInfo", "ApprovalNotice", "ApprovalStatus"]


class ApprovalStatus(StrEnum):
    """State of an approval request."""

    PENDING = "pending"
    ESCALATED = "escalated"
    APPROVED = "approved"
    REJECTED = "rejected"
    VOID = "void"  # its task was cancelled: it can no longer be decided
    EXPIRED = "expired"  # nobody decided before the rule's expire_after


class ApprovalInfo(BaseModel):
    """An approval request as recorded."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    approval_id: str
    task_id: str
    tool: str
    args: dict[str, Any]
    status: ApprovalStatus
    reason: str = ""
    requested_at: datetime
    escalate_at: datetime | None = None
    escalation_task_id: str | None = None
    escalated_at: datetime | None = None
    notify_task_id: str | None = None
    expiry_task_id: str | None = None
    run_at: datetime | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    decision_note: str | None = None
    #: A digest of the stored record (never stored itself): it changes with every
    #: change of the approval; pass it back as ``if_version`` to decide only that.
    version: str = ""

    def _repr_html_(self) -> str:
        from agentq.notebook.html import approval_html

        return approval_html(self)


class ApprovalNotice(BaseModel):
    """Arguments of the notification and escalation tools for an approval."""

    model_config = ConfigDict(extra="forbid")

    approval_id: str
    tool: str
    args: dict[str, Any]
    reason: str = ""
