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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agentq.statuses import ApprovalStatus

__all__ = ["ApprovalInfo", "ApprovalNotice", "ApprovalStatus"]


class ApprovalInfo(BaseModel):
    """An approval request as recorded."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

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
    #: The decider's note; for an approval nobody decided (expired,
    #: auto_rejected), the reason, as the task's ``error`` gives it too.
    decision_note: str | None = None
    #: The rule that asked for it (its ``name``, else ``approvals[N]``).
    rule: str | None = None
    #: Its escalation level (0: the first approvers), and who may decide at this
    #: level (names or roles; empty: anyone), besides the earlier levels'.
    level: int = 0
    approvers: list[str] = []
    #: When the current level's deadline passes and what it does then
    #: (``escalate``, ``reject`` or ``expire``); None: no deadline at this level.
    deadline: datetime | None = None
    on_deadline: str | None = None
    deadline_task_id: str | None = None
    reminder_task_ids: list[str] = []
    #: The arguments the approver approved, when they edited the call's (``args``
    #: stays what was asked); the task runs with these.
    approved_args: dict[str, Any] | None = None
    #: The principal that enqueued the call (as its task's ``created_by``).
    created_by: str = "local"
    #: A digest of the stored record (never stored itself): it changes with every
    #: change of the approval; pass it back as ``if_version`` to decide only that.
    version: str = ""

    def _repr_html_(self) -> str:
        from agentq.notebook.html import approval_html

        return approval_html(self)


class ApprovalNotice(BaseModel):
    """Arguments of the notification and escalation tools for an approval.

    ``event`` says why it is sent: ``requested`` (a new approval), ``reminder``
    (still undecided, ``deadline`` ahead) or ``escalation`` (nobody decided in
    time: it now goes to ``approvers`` at ``level``)."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    approval_id: str
    tool: str
    args: dict[str, Any]
    reason: str = ""
    event: Literal["requested", "reminder", "escalation"] = "requested"
    level: int = 0
    approvers: list[str] = []
    #: ISO 8601 (a string, so ``model_dump()`` stays plain JSON for a tool's POST).
    deadline: str | None = None
