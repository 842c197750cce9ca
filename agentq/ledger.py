"""The results ledger: every task's status, attempts, result or error.

Ledger records are written in the same transactions as the queue operations
they describe, so the ledger and the queues never disagree.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentq.statuses import TaskStatus

__all__ = ["TERMINAL", "Tables", "TaskInfo", "TaskStatus"]


class Tables:
    """Record tables of the runtime's own state."""

    TASKS = "tasks"
    IDEMPOTENCY = "idempotency"
    APPROVALS = "approvals"
    ORDERING = "ordering"
    DEAD_LETTERS = "dead_letters"
    HOLDS = "holds"
    AUDIT = "audit"
    WORKERS = "workers"
    JOINS = "joins"
    SCHEDULES = "schedules"
    #: Task arguments kept out of band (:mod:`agentq.lifecycle.payloads`).
    PAYLOADS = "payloads"
    #: Durable agent runs (:mod:`agentq.lifecycle.runs`).
    RUNS = "runs"
    #: A run's idempotency key (per owner) -> the run it named.
    RUN_KEYS = "run_keys"
    #: An owner's durable runs' usage per UTC day (:mod:`agentq.lifecycle.run_budgets`).
    RUN_USAGE = "run_usage"


TERMINAL = frozenset({TaskStatus.SUCCEEDED, TaskStatus.DEAD, TaskStatus.CANCELLED})


class TaskInfo(BaseModel):
    """A task as the ledger records it."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    task_id: str
    tool: str
    kind: str = "action"
    status: TaskStatus
    attempt: int
    failures: int = 0
    deliveries: int = 0
    #: The validated arguments, also when they are kept out of band (empty only
    #: for a task whose earlier release of agentq deleted them when it ended).
    args: dict[str, Any] = Field(default_factory=dict)
    #: Set when the arguments are kept out of band: their ``bytes`` and
    #: ``sha256`` (and ``released`` if an earlier release deleted them).
    args_ref: dict[str, Any] | None = None
    result: Any = None
    error: str | None = None
    #: The traceback of the failure that ``error`` describes (redacted), if any.
    traceback: str | None = None
    ordering_key: str | None = None
    approval_id: str | None = None
    #: How its approval was decided, once it was: ``approved``, ``rejected`` (by a
    #: human), ``auto_rejected`` or ``expired`` (nobody decided in time; ``error``
    #: says why), ``void`` (the task was cancelled first); None while undecided.
    approval_status: str | None = None
    idempotency_key: str | None = None
    #: The principal that enqueued it (an HTTP or MCP token's name, a Python
    #: caller's ``by=``; ``local`` when none was given, and for tasks recorded
    #: before owners existed); the runtime's own tasks (timers, notices,
    #: webhooks) are ``agentq``.
    created_by: str = "local"
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    next_attempt_at: datetime | None = None
    #: The tasks this one waits on (``enqueue(..., after=[...])``), and those of
    #: them that have not succeeded yet.
    after: list[str] = Field(default_factory=list)
    waiting_on: list[str] = Field(default_factory=list)

    @property
    def done(self) -> bool:
        """Whether the task reached a final status."""
        return self.status in TERMINAL

    def _repr_html_(self) -> str:
        from agentq.notebook.html import task_html

        return task_html(self)
