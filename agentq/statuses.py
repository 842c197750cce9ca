"""The statuses of tasks, approvals and durable runs: plain enumerations, kept
apart from the records that carry them (:mod:`agentq.ledger`,
:mod:`agentq.approvals`, :mod:`agentq.run_info`, which export them too) so that
the CLI builds its parser (``--status`` choices) without importing pydantic:
``agentq --help`` and ``--version`` answer at once."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ApprovalStatus", "RunStatus", "TaskStatus"]


class TaskStatus(StrEnum):
    """Where a task is in its life.

    ``retry_scheduled`` means the last attempt failed (or was throttled) and the
    next one is scheduled at ``next_attempt_at``; ``dead`` means agentq gave up
    and the task is in the dead-letter queue. ``waiting`` means it runs once the
    tasks it waits on (``after``) have succeeded; ``outcome_unknown`` means an
    attempt of a non-idempotent call may have reached the external API and ended
    without a result, and an operator decides (:meth:`Runtime.resolve`). Ledgers
    written before this name existed said ``failed``; it is read as ``retry_scheduled``.
    """

    AWAITING_APPROVAL = "awaiting_approval"
    WAITING = "waiting"
    QUEUED = "queued"
    RUNNING = "running"
    RETRY_SCHEDULED = "retry_scheduled"
    OUTCOME_UNKNOWN = "outcome_unknown"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @classmethod
    def _missing_(cls, value: object) -> TaskStatus | None:
        return cls.RETRY_SCHEDULED if value == "failed" else None


class ApprovalStatus(StrEnum):
    """State of an approval request."""

    PENDING = "pending"
    ESCALATED = "escalated"
    APPROVED = "approved"
    REJECTED = "rejected"
    VOID = "void"  # its task was cancelled: it can no longer be decided
    EXPIRED = "expired"  # nobody decided in time; the request lapsed (expire_after, on_timeout)
    AUTO_REJECTED = "auto_rejected"  # nobody decided in time; the rule says that is a no


class RunStatus(StrEnum):
    """Where a run is.

    ``queued``: its next turn is a task waiting for a worker (``running`` while
    a worker holds it); ``awaiting_tools``: the tool tasks of its last turn are
    not all finished; ``awaiting_approval``: one of them waits for a human;
    ``succeeded``: the model answered without calling a tool (the answer is its
    ``output``; a new user message queues it again); ``failed``: a model call
    failed for good, or a budget ran out (``error`` says which); ``cancelled``.
    """

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_TOOLS = "awaiting_tools"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
