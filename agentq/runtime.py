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
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from agentq import catalog, overview, waiting, webhooks
from agentq.approvals import ApprovalInfo, ApprovalStatus
from agentq.backends import Backend, Transaction, open_backend
from agentq.clock import Clock, FakeClock
from agentq.decision import Decision
from agentq.envelope import task_queue_spec
from agentq.errors import (
    ApprovalNotFound,
    ConfigError,
    IllegalTransition,
    TaskNotFound,
    UnknownTool,
)
from agentq.faults import FaultPoints
from agentq.ledger import Tables, TaskInfo, TaskStatus
from agentq.lifecycle import approvals as approval_events
from agentq.lifecycle import audit, dead_letters
from agentq.lifecycle.audit import AuditAction, AuditEntry
from agentq.lifecycle.tasks import BUILTIN_ESCALATION, BUILTIN_EXPIRY, ESCALATION_QUEUE
from agentq.notebook.html import ApprovalList, QueueStatsList, TaskList
from agentq.overview import ToolCounts, WorkerInfo
from agentq.policies import Policy, load_policies
from agentq.telemetry import Telemetry
from agentq.tools import ToolDef, ToolRegistry

if TYPE_CHECKING:
    from agentq.notebook.idle import IdleReport

__all__ = [
    "ESCALATION_QUEUE",
    "REPLAY_REFUSALS",
    "Decision",
    "ReplayReport",
    "Runtime",
    "Submission",
    "TaskPage",
]

T = TypeVar("T")

#: Why one dead-letter entry cannot be replayed; anything else (the database
#: failing, say) stops a replay of many instead of being reported per entry.
REPLAY_REFUSALS = (IllegalTransition, TaskNotFound, ConfigError)


#: Ledger records read per query by :meth:`Runtime.task_page`.
SCAN_PAGE = 500


@dataclass
class TaskPage:
    """One page of :meth:`Runtime.task_page`: the tasks, and the cursor of the next
    page (``None`` when the ledger has no more)."""

    tasks: list[TaskInfo]
    next_after: str | None


@dataclass(frozen=True)
class Submission:
    """What :meth:`Runtime.submit` did: the task, and whether this call created it."""

    task: TaskInfo
    created: bool


@dataclass
class ReplayReport:
    """What :meth:`Runtime.replay_all` did: ids replayed, and ids skipped with why."""

    replayed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _registry(tools: str | Path | Iterable[Any] | None, reload: bool) -> ToolRegistry:
    """The registry of ``Runtime(tools=...)``: folders and decorated functions."""
    registry = ToolRegistry()
    if tools is None:
        return registry
    if isinstance(tools, str | Path) or callable(tools):
        items: list[Any] = [tools]
    elif isinstance(tools, Iterable):
        items = list(tools)
    else:
        raise ConfigError(
            f"tools must be a folder, a ToolRegistry or functions decorated with @agentq.tool, "
            f"not {type(tools).__name__}"
        )
    for t in items:
        if isinstance(t, str | Path):
            registry.load_dir(t, reload=reload)
        else:
            registry.add(t)
    return registry


class Runtime:
    """agentq's runtime over one database.

    ``db`` is a URL (``sqlite:///agentq.db``, ``sqlite:///:memory:``,
    ``spanner://...``) or an open backend. ``tools`` is a directory of tool
    modules, a registry, or an iterable of handlers decorated with
    :func:`~agentq.tool` (inline tools, as in a notebook) and directories;
    ``reload=True`` imports a tools directory again even if no file in it changed
    (a changed one is always imported again). ``policies`` is a directory of TOML
    files or a :class:`~agentq.policies.Policy`. ``settings`` is handed to
    handlers (API base URLs and the like).
    A runtime with tools records them (and its policies, if given) in the
    database's tool catalog (:meth:`record_tools`; ``agentq init`` and every
    worker at start do). A runtime without ``tools`` is a *producer*: it
    enqueues by tool name, validating arguments against the recorded JSON
    Schemas, with the given ``policies`` or else the recorded policy, and
    imports no handler code (see :mod:`agentq.catalog`).
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
        reload: bool = False,
        **backend_options: Any,
    ) -> None:
        if isinstance(db, str):
            self.backend: Backend = open_backend(db, clock=clock, **backend_options)
            self._owns_backend = True
        else:
            self.backend = db
            self._owns_backend = False
        self.clock: Clock = self.backend.clock
        # Without tools, calls are checked against the tool catalog that runtimes
        # with tools record in the database (agentq.catalog): no handler code needed.
        self.from_catalog = tools is None
        if isinstance(tools, ToolRegistry):
            self.tools = tools
        else:
            self.tools = _registry(tools, reload)
        if webhooks.WEBHOOK_TOOL not in self.tools:
            self.tools.add(webhooks.deliver_webhook)  # every worker can send webhooks
        self._policy_given = policies is not None
        if isinstance(policies, Policy):
            self.policy = policies
        elif policies is not None or not self.from_catalog:
            self.policy = load_policies(policies)
        else:
            self.policy = catalog.read_policy(self.backend) or Policy()
        self._check_policy()
        self.settings: dict[str, Any] = dict(settings or {})
        self.faults = FaultPoints()
        self.telemetry = Telemetry()
        self.http_transport = http_transport or httpx.HTTPTransport()
        for queue in sorted(self.tools.queues() | {ESCALATION_QUEUE}):
            self.backend.create_queue(task_queue_spec(queue))
        self._internal = self._internal_tools()

    def record_tools(self) -> None:
        """Record this runtime's tools (and its policy, if it was given one) in the
        database's tool catalog, for producers without the tools' code. ``agentq
        init`` does, and every worker when it starts; nothing is written if the
        records are as they were."""
        if self.tools.names():
            catalog.record(self.backend, self.tools, self.policy if self._policy_given else None)

    def _check_policy(self) -> None:
        named = set(self.policy.tools) | {rule.tool for rule in self.policy.approvals}
        known = set(self.tools.names())
        if named - known and self.from_catalog:
            known |= set(catalog.read_tools(self.backend).names())
        hint = (
            " (this runtime has no tools and the database's tool catalog does not list "
            "it: run `agentq init` with the tools, or start a worker)"
            if self.from_catalog
            else ""
        )
        # A misspelt [tools.NAME] would otherwise leave the real tool unconfigured
        # (no allowed hosts, default limits) without a word.
        unknown = sorted(name for name in self.policy.tools if name not in known)
        if unknown:
            listed = ", ".join(sorted(t.name for t in self.tools if not t.internal)) or "none"
            raise ConfigError(
                f"policy configures unknown tool(s) {', '.join(map(repr, unknown))} "
                f"in [tools.…] (known tools: {listed}){hint}"
            )
        for rule in self.policy.approvals:
            if rule.tool not in known:
                raise ConfigError(f"approval rule for unknown tool {rule.tool!r}{hint}")

    def _internal_tools(self) -> frozenset[str]:
        """Tools only the runtime may send: declared internal, or named by a policy
        as the notification or escalation tool (they carry approval notices, and an
        agent that could send them could spoof one)."""
        named = {self.policy.defaults.notify_tool, self.policy.defaults.escalation_tool}
        for rule in self.policy.approvals:
            named |= {rule.notify_tool, rule.escalation_tool}
        declared = {t.name for t in self.tools if t.internal}
        return frozenset(n for n in named | declared if n)

    def find_tool(self, tx: Transaction, name: str) -> ToolDef | None:
        """The tool called ``name``: loaded, else (a runtime without tools) as the
        database's tool catalog records it, read in ``tx``; None if unknown."""
        if name in self.tools:
            return self.tools.get(name)
        return catalog.read_tool(tx, name) if self.from_catalog else None

    def enqueueable_tool(self, tx: Transaction, name: str) -> ToolDef:
        """The tool called ``name`` for a new task (:class:`UnknownTool` if none)."""
        found = self.find_tool(tx, name)
        if found is not None:
            return found
        if self.from_catalog:
            raise UnknownTool(
                f"unknown tool {name!r}: this runtime has no tools and the database's tool "
                "catalog does not list it (`agentq init` with the tools records them, as "
                "every worker does at start)"
            )
        return self.tools.get(name)  # raises UnknownTool, naming the known tools

    def is_internal(self, tool: str) -> bool:
        """Whether ``tool`` is sent only by the runtime (never by an agent)."""
        return tool in self._internal or tool.startswith("_")

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
        self, approval_id: str, by: str, note: str = "", *, if_version: str | None = None
    ) -> TaskInfo:
        """Approve a pending (or escalated) request; see :meth:`Decision.approve`.
        With ``if_version`` (an :attr:`ApprovalInfo.version`) an approval that
        changed since raises :class:`~agentq.errors.ApprovalChanged`. Audited:
        ``by`` is recorded as who approved."""
        return self._decide(approval_id, AuditAction.APPROVE, by, note, if_version)

    def reject(
        self, approval_id: str, by: str, note: str = "", *, if_version: str | None = None
    ) -> TaskInfo:
        """Reject a pending (or escalated) request (``if_version`` as for
        :meth:`approve`); audited like :meth:`approve`."""
        return self._decide(approval_id, AuditAction.REJECT, by, note, if_version)

    def _decide(
        self, approval_id: str, action: AuditAction, by: str, note: str, if_version: str | None
    ) -> TaskInfo:
        def fn(tx: Decision) -> TaskInfo:
            decide = tx.approve if action is AuditAction.APPROVE else tx.reject
            task = decide(approval_id, by, note, if_version=if_version)
            audit.record(
                tx.tx, actor=by, action=action, target=approval_id, task_id=task.task_id,
                note=note,
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

    def audit_log(self, *, target: str | None = None, limit: int | None = None) -> list[AuditEntry]:
        """Operator actions (approve, reject, cancel, replay, delete), newest first;
        only those about ``target`` (an approval, task or dead-letter id) if given."""
        return audit.entries(self.backend, target=target, limit=limit)

    # -- reading ----------------------------------------------------------------

    def task(self, task_id: str) -> TaskInfo:
        """Status, attempts, result or error of a task."""
        rec = self.backend.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return TaskInfo.model_validate(rec)

    def wait(self, task_id: str, timeout: float) -> TaskInfo:
        """Block until the task is finished (succeeded, dead or cancelled) or
        ``timeout`` seconds of the runtime's clock pass, and return it as it then
        is (check ``.done``). Woken by commits, this process's and other
        processes' (:mod:`agentq.waiting`), not by polling. An unknown task raises
        :class:`~agentq.errors.TaskNotFound`; ``timeout`` must be 0..3600 s."""
        return waiting.wait_for_task(self.backend, task_id, timeout)

    async def wait_async(self, task_id: str, timeout: float) -> TaskInfo:
        """Async form of :meth:`wait` (the same loop; no thread held while waiting)."""
        return await waiting.wait_for_task_async(self.backend, task_id, timeout)

    def task_changes(self, task_id: str, timeout: float) -> AsyncIterator[TaskInfo]:
        """Async iterator: the task now, then at each change, until it is final or
        ``timeout`` seconds pass (the HTTP API's server-sent events)."""
        return waiting.task_changes(self.backend, task_id, timeout)

    def _task_in(self, tx: Transaction, task_id: str) -> TaskInfo:
        rec = tx.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return TaskInfo.model_validate(rec)

    def tasks(
        self,
        status: TaskStatus | str | None = None,
        *,
        tool: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[TaskInfo]:
        """Tasks of the ledger, oldest first: only those with ``status``, of
        ``tool``, created at or after ``since``; at most ``limit`` of them (then
        the first ``limit`` in the ledger's order: see :meth:`task_page`). The
        list (a :class:`~agentq.notebook.html.TaskList`) shows as a table in a
        notebook."""
        page = self.task_page(status, tool=tool, since=since, limit=limit)
        return TaskList(sorted(page.tasks, key=lambda t: t.created_at))

    def task_page(
        self,
        status: TaskStatus | str | None = None,
        *,
        tool: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> TaskPage:
        """One page of the ledger in key order (creation order on SQLite, whose
        task ids grow with time; any fixed order on Spanner), filtered as in
        :meth:`tasks`. Pass the page's ``next_after`` as ``after`` for the next
        page; it is ``None`` after the last. The ledger is read
        :data:`SCAN_PAGE` records at a time, never all at once."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        wanted = None if status is None else TaskStatus(status)
        found: list[TaskInfo] = []
        cursor = after or ""
        while limit is None or len(found) < limit:
            rows = self.backend.list_records(Tables.TASKS, limit=SCAN_PAGE, after=cursor)
            for key, value in rows:
                cursor = key
                task = TaskInfo.model_validate(value)
                if (
                    (wanted is None or task.status == wanted)
                    and (tool is None or task.tool == tool)
                    and (since is None or task.created_at >= since)
                ):
                    found.append(task)
                    if limit is not None and len(found) == limit:
                        return TaskPage(found, key)
            if len(rows) < SCAN_PAGE:
                return TaskPage(found, None)
        return TaskPage(found, cursor)

    def approval(self, approval_id: str) -> ApprovalInfo:
        """One approval request."""
        rec = self.backend.get_record(Tables.APPROVALS, approval_id)
        if rec is None:
            raise ApprovalNotFound(f"no approval {approval_id!r}")
        return ApprovalInfo.model_validate({**rec, "version": approval_events.version(rec)})

    def approvals(self, status: ApprovalStatus | str | None = None) -> list[ApprovalInfo]:
        """Approval requests, optionally filtered by status (a list that shows as a
        table in a notebook)."""
        out = [
            ApprovalInfo.model_validate({**v, "version": approval_events.version(v)})
            for _, v in self.backend.list_records(Tables.APPROVALS)
        ]
        if status is not None:
            out = [a for a in out if a.status == ApprovalStatus(status)]
        return ApprovalList(sorted(out, key=lambda a: a.requested_at))

    def dead_letters(self) -> list[dict[str, Any]]:
        """Entries of the dead-letter queue with their errors. ``stray`` entries are
        messages that were no task's current delivery (written around agentq, or
        corrupt): they can be deleted, never replayed."""
        return [{**v, "entry_id": k} for k, v in self.backend.list_records(Tables.DEAD_LETTERS)]

    def replay(self, task_id: str, *, by: str | None = None) -> TaskInfo:
        """Send a dead task again for a fresh set of attempts. Only dead tasks can
        be replayed: a succeeded, cancelled, queued or running one raises
        :class:`~agentq.errors.IllegalTransition`, a stray entry too. Audited, with
        ``by`` as who replayed it."""

        def fn(tx: Decision) -> TaskInfo:
            rec = tx.tx.get_record(Tables.TASKS, task_id)
            if rec is not None and not self._runnable_tool(tx.tx, rec["tool"]):
                raise ConfigError(f"cannot replay {task_id!r}: unknown tool {rec['tool']!r}")
            task = TaskInfo.model_validate(dead_letters.replay(self, tx.tx, task_id))
            audit.record(
                tx.tx, actor=by, action=AuditAction.REPLAY, target=task_id, task_id=task_id
            )
            return task

        return self.transact(fn)

    def replay_all(self, *, by: str | None = None) -> ReplayReport:
        """Replay every dead task, each in its own transaction; entries that cannot
        be replayed (strays, unknown tools, tasks no longer dead) are skipped and
        reported, never stopping the others."""
        report = ReplayReport()
        for entry_id, _ in self.backend.list_records(Tables.DEAD_LETTERS):
            try:
                self.replay(entry_id, by=by)
                report.replayed.append(entry_id)
            except REPLAY_REFUSALS as exc:
                report.skipped[entry_id] = str(exc)
        return report

    def delete_dead_letters(
        self, entry_ids: Iterable[str], *, by: str | None = None
    ) -> list[str]:
        """Delete dead-letter entries (the tasks stay dead in the ledger); returns
        the ids that were deleted, in one transaction. Each deletion is audited,
        with ``by`` as who deleted it."""
        ids = list(entry_ids)

        def fn(tx: Transaction) -> list[str]:
            deleted = []
            for entry_id in ids:
                entry = tx.get_record(Tables.DEAD_LETTERS, entry_id)
                if entry is None or not tx.delete_record(Tables.DEAD_LETTERS, entry_id):
                    continue
                deleted.append(entry_id)
                audit.record(
                    tx, actor=by, action=AuditAction.DELETE_DEAD_LETTER, target=entry_id,
                    task_id=entry.get("task_id"),
                )  # fmt: skip
            return deleted

        return self.backend.transact(fn)

    def _runnable_tool(self, tx: Transaction, tool: str) -> bool:
        builtin = tool in (BUILTIN_ESCALATION, BUILTIN_EXPIRY)
        return builtin or self.find_tool(tx, tool) is not None

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of the tools an agent may call (internal
        tools and tools declared ``visible=False`` are left out)."""
        known = catalog.read_tools(self.backend) if self.from_catalog else self.tools
        return [
            t.schema() for t in sorted(known, key=lambda t: t.name)
            if t.visible and not t.internal and not self.is_internal(t.name)
        ]  # fmt: skip

    # -- workers ----------------------------------------------------------------

    def tool_counts(self) -> list[ToolCounts]:
        """Per tool: tasks queued, running, retrying, awaiting approval and dead, and
        the oldest unfinished one's age; read a page of the ledger at a time."""
        return overview.tool_counts(self.backend, self.clock.now())

    def workers(self, live_within: float = overview.LIVE_SECONDS) -> list[WorkerInfo]:
        """Workers that published a heartbeat (``live``: heard from within
        ``live_within`` seconds); see :mod:`agentq.executor.heartbeat`."""
        return overview.workers(self.backend, self.clock.now(), live_within)

    def worker(self, **options: Any) -> Any:
        """An executor over this runtime's queues; see :class:`agentq.executor.Worker`."""
        from agentq.executor import Worker

        return Worker(self, **options)

    # -- notebooks (the code is in agentq.notebook) ---------------------------------

    def queue_stats(self) -> QueueStatsList:
        """Depth, ready, scheduled and leased messages of every queue this runtime uses."""
        names = sorted(self.tools.queues() | {ESCALATION_QUEUE})
        return QueueStatsList(self.backend.stats(q) for q in names)

    def run_until_idle(
        self,
        *,
        clock: FakeClock | None = None,
        until: datetime | timedelta | None = None,
        max_steps: int = 100,
        **worker_options: Any,
    ) -> IdleReport:
        """Run every ready task, jump the fake clock to the next timer (retry,
        delayed task, escalation, expiry), and again, until nothing is due; see
        :func:`agentq.notebook.idle.run_until_idle`."""
        from agentq.notebook.idle import run_until_idle

        return run_until_idle(
            self, clock=clock, until=until, max_steps=max_steps, **worker_options
        )

    def tasks_frame(self, status: TaskStatus | str | None = None) -> Any:
        """The ledger as a pandas DataFrame, one row per task (``agentq[notebook]``)."""
        from agentq.notebook.frame import tasks_frame

        return tasks_frame(self.tasks(status))

    def plot_timeline(self, **options: Any) -> Any:
        """A matplotlib figure of the run: a bar per task from enqueue to finish,
        coloured by outcome, escalations marked (``agentq[notebook]``); see
        :func:`agentq.notebook.timeline.plot_timeline`."""
        from agentq.notebook.timeline import plot_timeline

        return plot_timeline(self.tasks(), self.approvals(), **options)

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
