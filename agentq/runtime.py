"""The runtime: decisions, tasks, approvals, built only on the backend contract.

``Runtime`` is the entry point for agent frameworks, bots and notebooks::

    rt = Runtime("sqlite:///agentq.db", tools="tools", policies="policies")

    def decide(tx):
        tx.execute("UPDATE orders SET state = 'refunding' WHERE id = ?", (order_id,))
        tx.enqueue("execute_refund", {"order_id": order_id, "amount": 30})

    rt.transact(decide)           # state and task commit together, or neither
    rt.worker().drain()           # or: agentq worker

Every write below happens inside one backend transaction, so a crash between
any two steps leaves no half-done decision.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx

from agentq import ordering
from agentq.approvals import ApprovalInfo, ApprovalNotice, ApprovalStatus
from agentq.backends import Backend, Transaction, open_backend
from agentq.clock import Clock
from agentq.envelope import TaskEnvelope, TaskKind
from agentq.errors import ApprovalError, ConfigError, InvalidArguments, TaskNotFound
from agentq.faults import FaultPoints
from agentq.ids import new_task_id
from agentq.ledger import TERMINAL, Tables, TaskInfo, TaskStatus
from agentq.policies import Policy, load_policies
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec
from agentq.telemetry import Telemetry
from agentq.tools import ToolDef, ToolRegistry

__all__ = ["Decision", "Runtime"]

T = TypeVar("T")

#: Queue that holds escalation timers when no escalation tool is installed.
ESCALATION_QUEUE = "escalations"
_BUILTIN_ESCALATION = "_escalation"


def as_timedelta(value: float | timedelta) -> timedelta:
    """Seconds or a timedelta, as a timedelta."""
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def _iso(when: datetime) -> str:
    return when.isoformat()


def task_queue_spec(name: str) -> QueueSpec:
    """Spec of a task queue: key (task_id, attempt), JSON envelope payload."""
    return QueueSpec(
        name,
        (KeyColumn("task_id", KeyType.STR), KeyColumn("attempt", KeyType.INT)),
        payload=PayloadType.JSON,
        max_payload_bytes=64 * 1024,
    )


class Decision:
    """A decision transaction: application SQL plus task operations, atomically."""

    def __init__(self, runtime: Runtime, tx: Transaction) -> None:
        self.runtime = runtime
        self.tx = tx

    @property
    def now(self) -> datetime:
        """The transaction's time."""
        return self.tx.now

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run the application's own SQL in this transaction."""
        return self.tx.execute(sql, params)

    # -- tasks ---------------------------------------------------------------

    def enqueue(
        self,
        tool: str,
        args: Mapping[str, Any] | Any,
        *,
        ordering_key: str | None = None,
        idempotency_key: str | None = None,
        at: datetime | None = None,
        delay: float | timedelta | None = None,
        reason: str = "",
    ) -> TaskInfo:
        """Enqueue a tool call; validated now, committed with the transaction.

        If a policy says the call needs a human, it is recorded as awaiting
        approval instead (see :meth:`request_approval`). With an
        ``idempotency_key`` already used, the existing task is returned.
        """
        rt = self.runtime
        definition = rt.tools.get(tool)
        validated = definition.validate_args(args).model_dump(mode="json")
        if idempotency_key is not None:
            existing = self._existing(idempotency_key, tool)
            if existing is not None:
                return existing
        if at is not None and delay is not None:
            raise ValueError("give either at= or delay=, not both")
        deliver = at if delay is None else self.now + as_timedelta(delay)
        if rt.policy.approval_rule(tool, validated) or definition.requires_approval:
            approval = self._request_approval(
                definition, validated, reason, None, ordering_key, idempotency_key
            )
            return self.runtime._task_in(self.tx, approval.task_id)
        return self._create_task(
            definition, validated, "action", ordering_key, idempotency_key, None, deliver
        )

    def schedule(
        self, tool: str, args: Mapping[str, Any] | Any, *, at: datetime, **kw: Any
    ) -> TaskInfo:
        """Enqueue a tool call to run at ``at`` (a timer; cancel it with :meth:`cancel`)."""
        return self.enqueue(tool, args, at=at, **kw)

    def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not finished; its queue message is deleted.

        A running task's completion will then fail, so nothing of it is recorded.
        Returns False if the task had already finished.
        """
        rec = self.tx.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        if rec["status"] in TERMINAL:
            return False
        queue = rec["queue"]
        waiting = rec.get("ordering_key") and ordering.forget(self.tx, rec["ordering_key"], task_id)
        if rec["status"] != TaskStatus.AWAITING_APPROVAL and not waiting:
            self.tx.ack(queue, (task_id, rec["attempt"]), must_exist=False)
        self._finish(rec, TaskStatus.CANCELLED, error="cancelled")
        return True

    # -- approvals -----------------------------------------------------------

    def request_approval(
        self,
        tool: str,
        args: Mapping[str, Any] | Any,
        *,
        reason: str = "",
        escalate_after: float | timedelta | None = None,
        ordering_key: str | None = None,
    ) -> ApprovalInfo:
        """Ask a human to approve a tool call; schedules its escalation."""
        definition = self.runtime.tools.get(tool)
        validated = definition.validate_args(args).model_dump(mode="json")
        delay = None if escalate_after is None else as_timedelta(escalate_after)
        return self._request_approval(definition, validated, reason, delay, ordering_key, None)

    def approve(self, approval_id: str, by: str, note: str = "") -> TaskInfo:
        """Approve: record the decision, cancel the escalation, send the action."""
        task = self._decide(approval_id, ApprovalStatus.APPROVED, by, note)
        task.update(status=TaskStatus.QUEUED, updated_at=_iso(self.now))
        self.tx.put_record(Tables.TASKS, task["task_id"], task)
        key = task.get("ordering_key")
        if key is None or ordering.admit(self.tx, key, task["task_id"]):
            self._send(task, None)
        return TaskInfo.model_validate(task)

    def reject(self, approval_id: str, by: str, note: str = "") -> TaskInfo:
        """Reject: record the decision, cancel the escalation and the action."""
        task = self._decide(approval_id, ApprovalStatus.REJECTED, by, note)
        self._finish(task, TaskStatus.CANCELLED, error=f"rejected by {by}: {note}".strip())
        return TaskInfo.model_validate(task)

    def _decide(
        self, approval_id: str, status: ApprovalStatus, by: str, note: str
    ) -> dict[str, Any]:
        """Record a human's decision and cancel the escalation; returns the action's record."""
        rec = self._open_approval(approval_id)
        rec.update(status=status, decided_at=_iso(self.now), decided_by=by, decision_note=note)
        self.tx.put_record(Tables.APPROVALS, approval_id, rec)
        self._cancel_escalation(rec)
        return self._task_record(rec["task_id"])

    # -- internals -------------------------------------------------------------

    def _existing(self, idempotency_key: str, tool: str) -> TaskInfo | None:
        rec = self.tx.get_record(Tables.IDEMPOTENCY, idempotency_key)
        if rec is None:
            return None
        if rec["tool"] != tool:
            raise InvalidArguments(
                f"idempotency key {idempotency_key!r} was already used for tool {rec['tool']!r}"
            )
        return self.runtime._task_in(self.tx, rec["task_id"])

    def _request_approval(
        self,
        definition: ToolDef,
        args: dict[str, Any],
        reason: str,
        delay: timedelta | None,
        ordering_key: str | None,
        idempotency_key: str | None,
    ) -> ApprovalInfo:
        rt = self.runtime
        rule = rt.policy.approval_rule(definition.name, args)
        delay = delay or rt.policy.escalation_delay(rule)
        approval_id = f"apr_{os.urandom(16).hex()}"
        task = self._create_task(
            definition, args, "action", ordering_key, idempotency_key, approval_id, None,
            send=False,
        )  # fmt: skip
        notice = ApprovalNotice(
            approval_id=approval_id, tool=definition.name, args=args, reason=reason
        ).model_dump(mode="json")
        escalate_at = self.now + delay
        escalation_tool = (
            rule.escalation_tool if rule else None
        ) or rt.policy.defaults.escalation_tool
        escalation = self._create_task(
            rt.tools.get(escalation_tool) if escalation_tool in rt.tools else None,
            notice, "escalation", None, None, approval_id, escalate_at,
            tool_name=_BUILTIN_ESCALATION, queue=ESCALATION_QUEUE,
        )  # fmt: skip
        record = ApprovalInfo(
            approval_id=approval_id,
            task_id=task.task_id,
            tool=definition.name,
            args=args,
            status=ApprovalStatus.PENDING,
            reason=reason,
            requested_at=self.now,
            escalate_at=escalate_at,
            escalation_task_id=escalation.task_id,
        )
        self.tx.put_record(Tables.APPROVALS, approval_id, record.model_dump(mode="json"))
        notify_tool = (rule.notify_tool if rule else None) or rt.policy.defaults.notify_tool
        if notify_tool and notify_tool in rt.tools:
            self._create_task(
                rt.tools.get(notify_tool), notice, "notify", None, None, approval_id, None
            )
        return record

    def _open_approval(self, approval_id: str) -> dict[str, Any]:
        rec = self.tx.get_record(Tables.APPROVALS, approval_id)
        if rec is None:
            raise ApprovalError(f"no approval {approval_id!r}")
        if rec["status"] in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED):
            raise ApprovalError(
                f"approval {approval_id!r} was already {rec['status']} by {rec['decided_by']} "
                f"at {rec['decided_at']}"
            )
        return rec

    def _cancel_escalation(self, approval: dict[str, Any]) -> None:
        task_id = approval.get("escalation_task_id")
        if task_id:
            self.cancel(task_id)

    def _task_record(self, task_id: str) -> dict[str, Any]:
        rec = self.tx.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return rec

    def _create_task(
        self,
        definition: ToolDef | None,
        args: dict[str, Any],
        kind: TaskKind,
        ordering_key: str | None,
        idempotency_key: str | None,
        approval_id: str | None,
        deliver: datetime | None,
        *,
        send: bool = True,
        tool_name: str | None = None,
        queue: str | None = None,
    ) -> TaskInfo:
        rt = self.runtime
        task_id = new_task_id(self.now if rt.backend.ordered_keys else None)
        name = definition.name if definition else str(tool_name)
        now = _iso(self.now)
        trace = rt.telemetry.enqueue_trace(name, task_id)
        rec: dict[str, Any] = {
            "task_id": task_id,
            "tool": name,
            "kind": kind,
            "queue": definition.queue if definition else queue,
            "status": TaskStatus.QUEUED if send else TaskStatus.AWAITING_APPROVAL,
            "attempt": 1,
            "failures": 0,
            "throttles": 0,
            "deliveries": 0,
            "args": args,
            "ordering_key": ordering_key,
            "approval_id": approval_id,
            "idempotency_key": idempotency_key,
            "trace": trace,
            "created_at": now,
            "updated_at": now,
            "next_attempt_at": _iso(deliver) if deliver else None,
        }
        self.tx.put_record(Tables.TASKS, task_id, rec)
        if idempotency_key is not None:
            self.tx.put_record(
                Tables.IDEMPOTENCY, idempotency_key, {"task_id": task_id, "tool": name}
            )
        if send and (ordering_key is None or ordering.admit(self.tx, ordering_key, task_id)):
            self._send(rec, deliver)
        rt.faults.hit("in_decision", task_id=task_id)
        return TaskInfo.model_validate(rec)

    def _send(self, rec: Mapping[str, Any], deliver: datetime | None) -> None:
        self.tx.send(rec["queue"], (rec["task_id"], rec["attempt"]), envelope_payload(rec), deliver)
        self.runtime.telemetry.sent.add(1, {"queue": rec["queue"]})

    def _finish(
        self,
        rec: dict[str, Any],
        status: TaskStatus,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        """Record a final status and let the next task of its ordering key go."""
        finish_record(rec, status, _iso(self.now), result=result, error=error)
        self.tx.put_record(Tables.TASKS, rec["task_id"], rec)
        key = rec.get("ordering_key")
        if key:
            nxt = ordering.release(self.tx, key, rec["task_id"])
            if nxt is not None:
                self._send(self._task_record(nxt), None)


def finish_record(
    rec: dict[str, Any],
    status: TaskStatus,
    now: str,
    *,
    result: Any = None,
    error: str | None = None,
) -> None:
    """Set a ledger record's final status (``now`` as ISO text), in place."""
    rec.update(
        status=status, result=result, error=error, updated_at=now, finished_at=now,
        next_attempt_at=None,
    )  # fmt: skip


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


def envelope_of(rec: Mapping[str, Any]) -> TaskEnvelope:
    """The envelope of a task's current attempt, rebuilt from its ledger record."""
    return TaskEnvelope(
        task_id=rec["task_id"],
        tool=rec["tool"],
        args=rec["args"],
        attempt=rec["attempt"],
        failures=rec.get("failures", 0),
        throttles=rec.get("throttles", 0),
        kind=rec.get("kind", "action"),
        ordering_key=rec.get("ordering_key"),
        approval_id=rec.get("approval_id"),
        checkpoint=rec.get("checkpoint"),
        trace=rec.get("trace") or {},
        enqueued_at=datetime.fromisoformat(rec["created_at"]),
    )


class Runtime:
    """agentq's runtime over one database.

    ``db`` is a URL (``sqlite:///agentq.db``, ``sqlite:///:memory:``,
    ``spanner://...``) or an open backend. ``tools`` is a directory of tool
    modules, a registry, or an iterable of decorated handlers; ``policies`` a
    directory of TOML files or a :class:`~agentq.policies.Policy`. ``settings``
    is handed to handlers (API base URLs and the like).
    """

    def __init__(
        self,
        db: str | Backend = "sqlite:///agentq.db",
        *,
        tools: str | Path | ToolRegistry | Iterable[Any] | None = None,
        policies: str | Path | Policy | None = None,
        clock: Clock | None = None,
        settings: Mapping[str, Any] | None = None,
        http_transport: httpx.BaseTransport | None = None,
        **backend_options: Any,
    ) -> None:
        if isinstance(db, str):
            self.backend: Backend = open_backend(db, clock=clock, **backend_options)
            self._owns_backend = True
        else:
            self.backend = db
            self._owns_backend = False
        self.clock: Clock = self.backend.clock
        if isinstance(tools, ToolRegistry):
            self.tools = tools
        else:
            self.tools = ToolRegistry()
            if isinstance(tools, str | Path):
                self.tools.load_dir(tools)
            elif tools is not None:
                for t in cast(Iterable[Any], tools):
                    self.tools.add(t)
        self.policy = policies if isinstance(policies, Policy) else load_policies(policies)
        self._check_policy()
        self.settings: dict[str, Any] = dict(settings or {})
        self.faults = FaultPoints()
        self.telemetry = Telemetry()
        self.http_transport = http_transport or httpx.HTTPTransport()
        for queue in sorted(self.tools.queues() | {ESCALATION_QUEUE}):
            self.backend.create_queue(task_queue_spec(queue))

    def _check_policy(self) -> None:
        for rule in self.policy.approvals:
            if rule.tool not in self.tools:
                raise ConfigError(f"approval rule for unknown tool {rule.tool!r}")

    # -- decisions ---------------------------------------------------------------

    def transact(self, fn: Callable[[Decision], T], *, durable: bool = True) -> T:
        """Run ``fn(tx)`` in one transaction: application SQL and task operations
        commit together or not at all. ``fn`` may be re-run on a transient abort,
        so it must not have outside effects."""
        return self.backend.transact(lambda tx: fn(Decision(self, tx)), durable=durable)

    def enqueue_action(
        self,
        tool: str,
        args: Mapping[str, Any] | Any,
        *,
        idempotency_key: str | None = None,
        ordering_key: str | None = None,
        reason: str = "",
    ) -> TaskInfo:
        """One-call enqueue for agent frameworks; the same ``idempotency_key``
        returns the same task, never a second one."""
        return self.transact(
            lambda tx: tx.enqueue(
                tool, args, idempotency_key=idempotency_key, ordering_key=ordering_key,
                reason=reason,
            )
        )  # fmt: skip

    def approve(self, approval_id: str, by: str, note: str = "") -> TaskInfo:
        """Approve a pending (or escalated) request; see :meth:`Decision.approve`."""
        return self.transact(lambda tx: tx.approve(approval_id, by, note))

    def reject(self, approval_id: str, by: str, note: str = "") -> TaskInfo:
        """Reject a pending (or escalated) request."""
        return self.transact(lambda tx: tx.reject(approval_id, by, note))

    def cancel(self, task_id: str) -> bool:
        """Cancel an unfinished task."""
        return self.transact(lambda tx: tx.cancel(task_id))

    # -- reading ----------------------------------------------------------------

    def task(self, task_id: str) -> TaskInfo:
        """Status, attempts, result or error of a task."""
        rec = self.backend.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return TaskInfo.model_validate(rec)

    def _task_in(self, tx: Transaction, task_id: str) -> TaskInfo:
        rec = tx.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return TaskInfo.model_validate(rec)

    def tasks(self, status: TaskStatus | str | None = None) -> list[TaskInfo]:
        """Every task in the ledger, optionally only those with ``status``."""
        out = [TaskInfo.model_validate(v) for _, v in self.backend.list_records(Tables.TASKS)]
        if status is not None:
            out = [t for t in out if t.status == TaskStatus(status)]
        return sorted(out, key=lambda t: t.created_at)

    def approval(self, approval_id: str) -> ApprovalInfo:
        """One approval request."""
        rec = self.backend.get_record(Tables.APPROVALS, approval_id)
        if rec is None:
            raise ApprovalError(f"no approval {approval_id!r}")
        return ApprovalInfo.model_validate(rec)

    def approvals(self, status: ApprovalStatus | str | None = None) -> list[ApprovalInfo]:
        """Approval requests, optionally filtered by status."""
        out = [
            ApprovalInfo.model_validate(v) for _, v in self.backend.list_records(Tables.APPROVALS)
        ]
        if status is not None:
            out = [a for a in out if a.status == ApprovalStatus(status)]
        return sorted(out, key=lambda a: a.requested_at)

    def dead_letters(self) -> list[dict[str, Any]]:
        """Tasks in the dead-letter queue, with their errors."""
        return [v for _, v in self.backend.list_records(Tables.DEAD_LETTERS)]

    def replay(self, task_id: str) -> TaskInfo:
        """Move a dead-lettered task back to its queue for a fresh set of attempts."""

        def fn(tx: Decision) -> TaskInfo:
            if not tx.tx.delete_record(Tables.DEAD_LETTERS, task_id):
                raise TaskNotFound(f"task {task_id!r} is not in the dead-letter queue")
            rec = tx._task_record(task_id)
            if rec["tool"] not in self.tools and rec["tool"] != _BUILTIN_ESCALATION:
                raise ConfigError(f"cannot replay {task_id!r}: unknown tool {rec['tool']!r}")
            rec.update(
                status=TaskStatus.QUEUED, attempt=rec["attempt"] + 1, failures=0, throttles=0,
                deliveries=0, error=None, finished_at=None, updated_at=_iso(tx.now),
            )  # fmt: skip
            rec["queue"] = rec.get("queue") or (
                self.tools.get(rec["tool"]).queue if rec["tool"] in self.tools else ESCALATION_QUEUE
            )
            tx.tx.put_record(Tables.TASKS, task_id, rec)
            tx._send(rec, None)
            return TaskInfo.model_validate(rec)

        return self.transact(fn)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of every tool (what the model is shown)."""
        return self.tools.schemas()

    # -- workers ----------------------------------------------------------------

    def worker(self, **options: Any) -> Any:
        """An executor over this runtime's queues; see :class:`agentq.executor.Worker`."""
        from agentq.executor import Worker

        return Worker(self, **options)

    # -- async forms (one implementation, thin wrappers) -------------------------------

    async def aenqueue_action(
        self, tool: str, args: Mapping[str, Any] | Any, **kw: Any
    ) -> TaskInfo:
        """Async form of :meth:`enqueue_action` for async agent frameworks."""
        return await asyncio.to_thread(self.enqueue_action, tool, args, **kw)

    async def atask(self, task_id: str) -> TaskInfo:
        """Async form of :meth:`task`."""
        return await asyncio.to_thread(self.task, task_id)

    async def aapprove(self, approval_id: str, by: str, note: str = "") -> TaskInfo:
        """Async form of :meth:`approve`."""
        return await asyncio.to_thread(self.approve, approval_id, by, note)

    def close(self) -> None:
        """Close the backend (if this runtime opened it) and the HTTP transport."""
        self.http_transport.close()
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
