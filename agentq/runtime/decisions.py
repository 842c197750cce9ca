"""The runtime's decisions: enqueue, submit, approve, reject and cancel.

Each one runs in one transaction (:meth:`~.core.RuntimeCore.transact`), and the
operator actions among them (approve, reject, cancel) are audited in the same one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agentq.decision import Decision
from agentq.ledger import Tables, TaskInfo
from agentq.lifecycle import audit
from agentq.lifecycle.audit import AuditAction
from agentq.runtime.core import RuntimeCore


@dataclass(frozen=True)
class Submission:
    """What :meth:`Runtime.submit` did: the task, and whether this call created it."""

    task: TaskInfo
    created: bool


class DecisionsMixin(RuntimeCore):
    """The decisions of :class:`~agentq.runtime.Runtime` (one transaction each)."""

    def enqueue_action(
        self,
        tool: str,
        args: Mapping[str, Any] | Any,
        *,
        idempotency_key: str | None = None,
        ordering_key: str | None = None,
        reason: str = "",
        callback_url: str | None = None,
        at: datetime | None = None,
        delay: float | timedelta | None = None,
    ) -> TaskInfo:
        """One-call enqueue for agent frameworks; the same ``idempotency_key``
        returns the same task, never a second one. ``callback_url``: a signed
        completion webhook (:mod:`agentq.webhooks`); ``at`` / ``delay``: run it
        later (see :meth:`Decision.enqueue`)."""
        return self.submit(
            tool, args, idempotency_key=idempotency_key, ordering_key=ordering_key,
            reason=reason, callback_url=callback_url, at=at, delay=delay,
        ).task  # fmt: skip

    def submit(
        self,
        tool: str,
        args: Mapping[str, Any] | Any,
        *,
        idempotency_key: str | None = None,
        ordering_key: str | None = None,
        reason: str = "",
        callback_url: str | None = None,
        at: datetime | None = None,
        delay: float | timedelta | None = None,
    ) -> Submission:
        """:meth:`enqueue_action`, also telling whether this call created the task
        (False: its ``idempotency_key`` had created it before)."""

        def fn(tx: Decision) -> Submission:
            fresh = idempotency_key is None or (
                tx.tx.get_record(Tables.IDEMPOTENCY, idempotency_key) is None
            )
            task = tx.enqueue(
                tool, args, idempotency_key=idempotency_key, ordering_key=ordering_key,
                reason=reason, callback_url=callback_url, at=at, delay=delay,
            )  # fmt: skip
            return Submission(task, created=fresh)

        return self.transact(fn)

    def approve(
        self,
        approval_id: str,
        by: str,
        note: str = "",
        *,
        if_version: str | None = None,
        args: Mapping[str, Any] | Any | None = None,
    ) -> TaskInfo:
        """Approve a pending (or escalated) request; see :meth:`Decision.approve`.
        With ``if_version`` (an :attr:`ApprovalInfo.version`) an approval that
        changed since raises :class:`~agentq.errors.ApprovalChanged`. With
        ``args`` the approver edits the call (the whole argument object): checked
        against the tool's schema and the policy in the same transaction. Audited:
        ``by`` is recorded as who approved, and an edit's arguments before and after."""
        return self._decide(approval_id, AuditAction.APPROVE, by, note, if_version, args)

    def reject(
        self, approval_id: str, by: str, note: str = "", *, if_version: str | None = None
    ) -> TaskInfo:
        """Reject a pending (or escalated) request (``if_version`` as for
        :meth:`approve`); audited like :meth:`approve`."""
        return self._decide(approval_id, AuditAction.REJECT, by, note, if_version)

    def _decide(
        self,
        approval_id: str,
        action: AuditAction,
        by: str,
        note: str,
        if_version: str | None,
        args: Mapping[str, Any] | Any | None = None,
    ) -> TaskInfo:
        def fn(tx: Decision) -> TaskInfo:
            if action is AuditAction.APPROVE:
                task = tx.approve(approval_id, by, note, if_version=if_version, args=args)
            else:
                task = tx.reject(approval_id, by, note, if_version=if_version)
            decided = tx.tx.get_record(Tables.APPROVALS, approval_id) or {}
            edited = decided.get("approved_args")
            audit.record(
                tx.tx, actor=by, action=action, target=approval_id, task_id=task.task_id,
                note=note, original_args=decided.get("args") if edited is not None else None,
                edited_args=edited,
            )  # fmt: skip
            return task

        return self.transact(fn)

    def cancel(self, task_id: str, reason: str = "cancelled", *, by: str | None = None) -> TaskInfo:
        """Cancel an unfinished task; see :meth:`Decision.cancel`. Audited, with
        ``by`` as who cancelled."""

        def fn(tx: Decision) -> TaskInfo:
            task = tx.cancel(task_id, reason)
            audit.record(
                tx.tx, actor=by, action=AuditAction.CANCEL, target=task_id, task_id=task_id,
                note=reason,
            )  # fmt: skip
            return task

        return self.transact(fn)
