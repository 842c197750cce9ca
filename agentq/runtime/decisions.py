"""The runtime's decisions: enqueue, submit, approve, reject and cancel.

Each one runs in one transaction (:meth:`~.core.RuntimeCore.transact`), and the
operator actions among them (approve, reject, cancel) are audited in the same one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from agentq.decision import Decision, EnqueueOptions, Submission
from agentq.errors import InvalidArguments
from agentq.ledger import Tables, TaskInfo
from agentq.lifecycle import audit, guarded
from agentq.lifecycle.audit import AuditAction
from agentq.lifecycle.guarded import Resolution
from agentq.runtime.core import RuntimeCore

__all__ = ["DecisionsMixin", "Submission"]


class DecisionsMixin(RuntimeCore):
    """The decisions of :class:`~agentq.runtime.Runtime` (one transaction each)."""

    def enqueue_action(
        self, tool: str, args: Mapping[str, Any] | Any, **options: Unpack[EnqueueOptions]
    ) -> TaskInfo:
        """One-call enqueue for agent frameworks; the same ``idempotency_key``
        returns the same task, never a second one. ``callback_url``: a signed
        completion webhook (:mod:`agentq.webhooks`); ``at`` / ``delay``: run it
        later; ``dedupe_key`` / ``debounce``: collapse a burst of the same call
        into its pending task; ``after``: only once those tasks have succeeded (see
        :meth:`Decision.enqueue`)."""
        return self.submit(tool, args, **options).task

    def submit(
        self, tool: str, args: Mapping[str, Any] | Any, **options: Unpack[EnqueueOptions]
    ) -> Submission:
        """:meth:`enqueue_action`, also telling whether this call created the task
        (False: its ``idempotency_key`` had created it before, or it collapsed
        into the pending task of its ``dedupe_key``: then ``collapsed`` is True)."""

        return self.transact(lambda tx: tx.submit(tool, args, **options))

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

    def resolve(
        self,
        task_id: str,
        resolution: Resolution | str,
        *,
        result: Any = None,
        by: str | None = None,
        note: str = "",
    ) -> TaskInfo:
        """Resolve a task parked as ``outcome_unknown`` (a non-idempotent call that
        may have applied, with no reconcile handler): ``"succeeded"`` records
        ``result`` (checked against the tool's result model, when the tool is
        known) as if the call had returned it; ``"retry"`` makes the call again as
        a new attempt; ``"failed"`` dead-letters the task. Audited, with ``by``."""
        try:
            how = Resolution(resolution)
        except ValueError:
            known = ", ".join(r.value for r in Resolution)
            raise InvalidArguments(f"unknown resolution {resolution!r} (known: {known})") from None
        if how is not Resolution.SUCCEEDED and result is not None:
            raise InvalidArguments(
                f"a result is recorded only when resolving as succeeded, not {how}"
            )

        def fn(tx: Decision) -> TaskInfo:
            rec = tx.tx.get_record(Tables.TASKS, task_id)
            definition = self.find_tool(tx.tx, rec["tool"]) if rec else None
            value = result
            if how is Resolution.SUCCEEDED and definition is not None:
                try:
                    value = definition.dump_result(result)
                except ValueError as exc:
                    raise InvalidArguments(
                        f"result for {task_id!r} does not fit tool {rec['tool']!r}: {exc}"  # type: ignore[index]
                    ) from None
            task = TaskInfo.model_validate(
                guarded.resolve(self._facade, tx.tx, task_id, how, result=value, note=note)
            )
            audit.record(
                tx.tx, actor=by, action=AuditAction.RESOLVE, target=task_id, task_id=task_id,
                note=f"{how}: {note}" if note else str(how),
            )  # fmt: skip
            return task

        return self.transact(fn)
