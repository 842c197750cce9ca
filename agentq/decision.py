"""A decision transaction: application SQL plus task operations, atomically.

``Runtime.transact(fn)`` hands ``fn`` a :class:`Decision`. Everything it does
commits together or not at all; every task or approval state change it makes
goes through :mod:`agentq.lifecycle`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Unpack

from agentq import idempotency, joins, webhooks
from agentq.approvals import ApprovalInfo
from agentq.backends import Transaction
from agentq.batching import windowed_delivery
from agentq.enqueue_options import (
    MAX_DEBOUNCE,
    EnqueueOptions,
    as_timedelta,
    asked,
    checked_key,
    checked_options,
)
from agentq.errors import ApprovalNotFound, InvalidArguments, ToolError
from agentq.ledger import Tables, TaskInfo
from agentq.lifecycle import approval_timers, approvals, dedupe, tasks
from agentq.lifecycle.states import Event
from agentq.policies import ApprovalRule, parse_duration
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.runtime import Runtime

__all__ = ["Decision", "EnqueueOptions", "Submission", "as_timedelta"]


@dataclass(frozen=True)
class Submission:
    """What an enqueue did: the task, whether this call created it, and whether it
    collapsed into the pending task of its ``dedupe_key`` (:mod:`agentq.lifecycle.dedupe`)."""

    task: TaskInfo
    created: bool
    collapsed: bool = False


class Decision:
    """A decision transaction: application SQL plus task operations, atomically."""

    def __init__(self, runtime: Runtime, tx: Transaction) -> None:
        self.runtime = runtime
        self.tx = tx

    @property
    def now(self) -> datetime:
        """The transaction's time."""
        return self.tx.now

    def _require_serializable(self, what: str) -> None:
        """On the application's own transaction (``Runtime.decision(conn)``), refuse
        ``what`` unless that transaction is SERIALIZABLE: it reads and writes back
        shared records. agentq's own transactions always are."""
        guard = getattr(self.tx, "require_serializable", None)
        if guard is not None:
            guard(what)

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run the application's own SQL in this transaction."""
        return self.tx.execute(sql, params)

    # -- tasks ---------------------------------------------------------------

    def enqueue(
        self, tool: str, args: Mapping[str, Any] | Any, **options: Unpack[EnqueueOptions]
    ) -> TaskInfo:
        """Enqueue a tool call; validated now, committed with the transaction.

        The options are keywords (:class:`EnqueueOptions`): ``ordering_key``
        (tasks with one key run one at a time, in order), ``idempotency_key``,
        ``at`` or ``delay`` (seconds or a timedelta: run it later), ``reason``
        (kept on its approval request, if it needs one), ``callback_url``,
        ``dedupe_key`` and ``debounce``, and ``after``; each is described below;
        ``by`` names the principal that asks (recorded as the task's
        ``created_by``, default ``"local"``: the surfaces pass their token's name).

        If a policy says the call needs a human, it is recorded as awaiting
        approval instead, keeping its scheduled time (approved before ``at``, it
        runs at ``at``; approved after, at once). The same ``idempotency_key``
        with the same call returns the existing task; with another call it raises
        :class:`~agentq.errors.IdempotencyConflict`. With ``callback_url`` its
        outcome is POSTed there, signed, once it is final (:mod:`agentq.webhooks`).

        With ``dedupe_key``, the same call while the key's task is still pending
        returns that task instead of a new one (the dirty-flag pattern; the exact
        rule is :mod:`agentq.lifecycle.dedupe`'s); ``debounce`` then delays a new
        task that long, so the calls of a burst collapse into it (the delay is
        not pushed back by later calls: a steady stream still runs once per
        ``debounce``). :meth:`submit` also says whether the call collapsed.

        With ``after`` (task ids or :class:`TaskInfo` records, existing ones only) it is
        ``waiting`` until all of them have succeeded, then sent (at ``at``, if that
        is still ahead) by the transaction that completes the last of them; if one
        of them dies or is cancelled it is cancelled too, the reason naming that
        task (:mod:`agentq.joins`). Already succeeded ones count as done.
        """
        return self.submit(tool, args, **options).task

    def submit(
        self, tool: str, args: Mapping[str, Any] | Any, **options: Unpack[EnqueueOptions]
    ) -> Submission:
        """:meth:`enqueue`, telling whether this call created the task (False: its
        ``idempotency_key`` had created it before, or it collapsed into the pending
        task of its ``dedupe_key``) and whether it collapsed."""
        checked_options(options)
        shared = [k for k in ("idempotency_key", "dedupe_key", "ordering_key", "after")
                  if options.get(k) is not None]  # fmt: skip
        if shared:
            self._require_serializable(f"an enqueue with {', '.join(shared)}")
        rt = self.runtime
        definition = self._enqueueable(tool)
        validated, args_text = definition.encoded_args(args)
        callback_url = options.get("callback_url")
        if callback_url is not None:
            callback_url = webhooks.check_callback_url(callback_url, rt.policy)
        ordering_key = checked_key("ordering_key", options.get("ordering_key"))
        idempotency_key = checked_key("idempotency_key", options.get("idempotency_key"))
        by = checked_key("by", options.get("by")) or tasks.LOCAL
        dedupe_key = checked_key("dedupe_key", options.get("dedupe_key"))
        at, delay, after = options.get("at"), options.get("delay"), options.get("after")
        debounce, reason = options.get("debounce"), options.get("reason", "")
        if at is not None and delay is not None:
            raise InvalidArguments("give either at= or delay=, not both")
        if after is not None and dedupe_key is not None:
            # A collapsed call would silently take on another task's prerequisites.
            raise InvalidArguments("give either after= or dedupe_key=, not both")
        deliver = at if delay is None else self.now + as_timedelta(delay)
        if debounce is not None:
            deliver = self._debounced(dedupe_key, deliver, debounce)
        deliver = windowed_delivery(rt.policy, definition, validated, deliver, self.now)
        fingerprint = None
        if idempotency_key is not None:
            fingerprint = idempotency.request_digest(tool, validated, asked(options))
            existing = idempotency.lookup(self.tx, idempotency_key, tool, validated, by=by,
                                          fingerprint=fingerprint)  # fmt: skip
            if existing is not None:
                return Submission(rt._task_in(self.tx, existing), created=False)
        if dedupe_key is not None:
            target = dedupe.pending(self.tx, tool, dedupe_key, validated,
                                    ordering_key=ordering_key, deliver=deliver)  # fmt: skip
            if target is not None:
                if idempotency_key is not None:  # a retry of this call finds the same task
                    idempotency.remember(self.tx, idempotency_key, tool, validated,
                                         str(target["task_id"]), created_by=by,
                                         fingerprint=fingerprint)  # fmt: skip
                return Submission(TaskInfo.model_validate(target), created=False, collapsed=True)
        needs_approval = bool(rt.policy.approval_rule(tool, validated))
        needs_approval = needs_approval or definition.requires_approval
        waits_on = self._prerequisites(after, ordering_key, needs_approval, tool)
        if needs_approval:
            approval = self._request(
                definition,
                validated,
                reason,
                None,
                ordering_key,
                idempotency_key,
                deliver,
                callback_url,
                by,
                fingerprint,
            )
            if dedupe_key is not None:
                dedupe.remember(self.tx, tool, dedupe_key, validated, approval.task_id)
            return Submission(rt._task_in(self.tx, approval.task_id), created=True)
        rec = tasks.create(
            rt, self.tx, tool=tool, queue=definition.queue, args=validated, kind="action",
            event=Event.ENQUEUE if deliver is None else Event.SCHEDULE,
            ordering_key=ordering_key, idempotency_key=idempotency_key, deliver=deliver,
            callback_url=callback_url, args_text=args_text, after=waits_on, created_by=by,
            fingerprint=fingerprint,
        )  # fmt: skip
        if dedupe_key is not None:
            dedupe.remember(self.tx, tool, dedupe_key, validated, str(rec["task_id"]))
        return Submission(TaskInfo.model_validate(rec), created=True)

    def _debounced(
        self, dedupe_key: str | None, deliver: datetime | None, debounce: str | float | timedelta
    ) -> datetime:
        """The delivery time of a new task of a debounced call."""
        if dedupe_key is None:
            raise InvalidArguments("debounce= needs a dedupe_key= (the calls it collapses)")
        if deliver is not None:
            raise InvalidArguments("give either debounce= or at=/delay=, not both")
        try:
            window = parse_duration(debounce)
        except (TypeError, ValueError, OverflowError):
            window = timedelta(-1)
        if not timedelta(0) <= window <= MAX_DEBOUNCE:
            raise InvalidArguments(f"debounce must be from 0 to 1 day, got {debounce!r}")
        return self.now + window

    def _prerequisites(
        self, after: Sequence[str | TaskInfo] | None, ordering_key: str | None,
        needs_approval: bool, tool: str,
    ) -> list[str]:  # fmt: skip
        """The unfinished tasks of ``after`` (checked, read in this transaction)."""
        if after is None:
            return []
        if ordering_key is not None or needs_approval:
            what = "an ordering key" if ordering_key is not None else "an approval"
            raise InvalidArguments(
                f"after= cannot be combined with {what} (tool {tool!r}): a waiting task is "
                "sent by its prerequisites' completion, and that would bypass it"
            )
        return joins.pending_prerequisites(self.tx, after)

    def schedule(
        self, tool: str, args: Mapping[str, Any] | Any, *, at: datetime, **kw: Any
    ) -> TaskInfo:
        """Enqueue a tool call to run at ``at`` (a timer; cancel it with :meth:`cancel`)."""
        return self.enqueue(tool, args, at=at, **kw)

    def cancel(self, task_id: str, reason: str = "cancelled") -> TaskInfo:
        """Cancel a task that has not finished.

        Its message is deleted, so no new attempt starts and a running attempt's
        completion fails (nothing of it is recorded); a task awaiting approval has
        its approval voided and its escalation and notification cancelled. A
        finished task raises :class:`~agentq.errors.IllegalTransition`.
        """
        self._require_serializable("a cancel")
        return TaskInfo.model_validate(tasks.cancel(self.runtime, self.tx, task_id, reason=reason))

    # -- approvals -----------------------------------------------------------

    def request_approval(
        self,
        tool: str,
        args: Mapping[str, Any] | Any,
        *,
        reason: str = "",
        escalate_after: float | timedelta | None = None,
        ordering_key: str | None = None,
        at: datetime | None = None,
        by: str | None = None,
    ) -> ApprovalInfo:
        """Ask a human to approve a tool call; schedules its escalation. ``by``:
        who asks (as for :meth:`enqueue`)."""
        if ordering_key is not None:
            self._require_serializable("an approval request with ordering_key")
        definition = self._enqueueable(tool)
        validated = definition.enqueueable_args(args)
        ordering_key = checked_key("ordering_key", ordering_key)
        delay = None if escalate_after is None else as_timedelta(escalate_after)
        by = checked_key("by", by) or tasks.LOCAL
        return self._request(
            definition, validated, reason, delay, ordering_key, None, at, created_by=by
        )

    def approve(
        self,
        approval_id: str,
        by: str,
        note: str = "",
        *,
        if_version: str | None = None,
        args: Mapping[str, Any] | Any | None = None,
    ) -> TaskInfo:
        """Approve: record the decision, cancel the approval's timers, send the
        action (at its scheduled time, if that is still ahead). With ``if_version``
        (an :attr:`ApprovalInfo.version`), only if the approval is still that version.

        With ``args`` the approver edits the call (the whole argument object, e.g.
        a lowered amount): validated against the tool's schema and the policy in
        this transaction, and approved under the rule the policy puts it under as
        well as the one it was asked under: if that is another rule, ``by`` must
        be one of its approvers (:class:`~agentq.errors.ApproverNotAllowed`
        otherwise), and if ``by`` enqueued the call, that rule must say
        ``self_approval = true`` (:class:`~agentq.errors.SelfApprovalRefused`
        otherwise: four eyes)."""
        self._require_serializable("an approval's decision")
        validated: dict[str, Any] | None = None
        edit: approvals.EditCheck | None = None
        if args is not None:
            validated, edit = self._edited(approval_id, args)
        rec = approvals.decide(self.runtime, self.tx, approval_id, Event.APPROVE, by=by,
                               note=note, if_version=if_version, args=validated,
                               edit=edit)  # fmt: skip
        definition = self.runtime.find_tool(self.tx, str(rec["tool"]))
        if definition is not None and definition.local and definition.handler is not None:
            rec = self._run_local(definition, rec)
        return TaskInfo.model_validate(rec)

    def _run_local(self, definition: ToolDef, rec: dict[str, Any]) -> dict[str, Any]:
        """A local tool's approved call runs here, in the transaction that
        approves it: its message (just sent) is taken back and its result
        recorded, so its writes commit with the approval or not at all."""
        if rec["status"] != "queued" or rec.get("ordering_key"):
            return rec  # held back (its ordering key): a worker cannot run it either
        due = rec.get("next_attempt_at")
        if due and datetime.fromisoformat(due) > self.now:
            return rec  # scheduled later: not now
        self.tx.ack(rec["queue"], (rec["task_id"], rec["attempt"]), must_exist=False)
        running = tasks.claimed(rec, self.now, int(rec.get("deliveries", 0)) + 1)
        args = definition.validate_args(self.runtime._task_in(self.tx, rec["task_id"]).args)
        result = definition.dump_result(definition.handler(self, args))
        return tasks.finish(self.runtime, self.tx, running, Event.SUCCEED, result=result)

    def reject(
        self, approval_id: str, by: str, note: str = "", *, if_version: str | None = None
    ) -> TaskInfo:
        """Reject: record the decision, cancel the escalation and the action."""
        self._require_serializable("an approval's decision")
        rec = approvals.decide(self.runtime, self.tx, approval_id, Event.REJECT, by=by,
                               note=note, if_version=if_version)  # fmt: skip
        return TaskInfo.model_validate(rec)

    # -- internals -------------------------------------------------------------

    def _edited(
        self, approval_id: str, args: Mapping[str, Any] | Any
    ) -> tuple[dict[str, Any], approvals.EditCheck]:
        """An approver's edited arguments, validated as an agent's would be, and
        what the policy in force says of them."""
        rt = self.runtime
        approval = self.tx.get_record(Tables.APPROVALS, approval_id)
        if approval is None:
            raise ApprovalNotFound(f"no approval {approval_id!r}")
        definition = rt.enqueueable_tool(self.tx, str(approval["tool"]))
        validated = definition.enqueueable_args(args)
        rule = rt.policy.approval_rule(definition.name, validated)
        if rule is None and definition.requires_approval:
            rule = ApprovalRule(tool=definition.name)
        if rule is None:
            return validated, approvals.EditCheck(rule=None, members=None)
        members = rt.policy.members(rule.approvers) if rule.approvers else None
        return validated, approvals.EditCheck(
            rt.policy.rule_label(rule), members, self_approval=rule.self_approval
        )

    def _enqueueable(self, tool: str) -> ToolDef:
        definition = self.runtime.enqueueable_tool(self.tx, tool)
        if definition.internal or self.runtime.is_internal(tool):
            raise ToolError(
                f"tool {tool!r} is internal: only the runtime sends it (approval notices "
                "and escalations), never an agent"
            )
        return definition

    def _request(
        self,
        definition: ToolDef,
        args: dict[str, Any],
        reason: str,
        delay: timedelta | None,
        ordering_key: str | None,
        idempotency_key: str | None,
        run_at: datetime | None,
        callback_url: str | None = None,
        created_by: str = tasks.LOCAL,
        fingerprint: str | None = None,
    ) -> ApprovalInfo:
        rt = self.runtime
        rule = rt.policy.approval_rule(definition.name, args)
        defaults = rt.policy.defaults
        escalation_tool = (rule.escalation_tool if rule else None) or defaults.escalation_tool
        notify_tool = (rule.notify_tool if rule else None) or defaults.notify_tool
        plan = approval_timers.plan(
            rt.policy, rule, escalate_after=delay or rt.policy.escalation_delay(rule),
            escalation=self._timer_tool(escalation_tool), notify=self._timer_tool(notify_tool),
        )  # fmt: skip
        return approvals.request(
            rt, self.tx, tool=definition.name, queue=definition.queue, args=args,
            reason=reason, plan=plan, expire_after=rule.expire_after if rule else None,
            ordering_key=ordering_key, idempotency_key=idempotency_key, run_at=run_at,
            callback_url=callback_url, created_by=created_by, fingerprint=fingerprint,
        )  # fmt: skip

    def _timer_tool(self, name: str | None) -> tuple[str, str] | None:
        """The notification or escalation tool's (name, queue), if that tool exists:
        without it, no notice is sent (an escalation runs the built-in timer)."""
        definition = self.runtime.find_tool(self.tx, name) if name else None
        return None if definition is None else (definition.name, definition.queue)
