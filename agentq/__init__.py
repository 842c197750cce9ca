"""agentq: run AI agents' tool calls reliably.

Decisions and the tool tasks they imply commit in one database transaction,
with the semantics of Google Cloud Spanner queues. The public API is exactly
``__all__``; everything else is private.
"""

import typing

if typing.TYPE_CHECKING:
    from agentq.agents import Agent, OpenAICompatibleModel
    from agentq.approvals import ApprovalInfo, ApprovalNotice, ApprovalStatus
    from agentq.backends import (
        LEASE_SECONDS,
        Backend,
        Message,
        QueueStats,
        RedeliveryPolicy,
        Renewal,
        Transaction,
        open_backend,
    )
    from agentq.batching import BatchContext
    from agentq.clock import Clock, FakeClock, SystemClock
    from agentq.context import Checkpoint, ToolContext
    from agentq.errors import (
        AgentQError,
        ApprovalError,
        ApproverNotAllowed,
        BackendUnavailable,
        ConfigError,
        DatabaseNotWritable,
        DuplicateKey,
        IdempotencyConflict,
        IllegalTransition,
        InvalidArguments,
        InvalidIdentifier,
        InvalidMessage,
        LeaseError,
        MessageNotFound,
        MissingExtra,
        NotIdle,
        PayloadTooLarge,
        PolicyViolation,
        QueueNotFound,
        RunNotFound,
        SelfApprovalRefused,
        TaskNotFound,
        ToolError,
        TransactionAborted,
        TransactionError,
        UnknownTool,
    )
    from agentq.executor import Worker, WorkerStats
    from agentq.faults import FaultPoints, WorkerCrash
    from agentq.ledger import TaskInfo, TaskStatus
    from agentq.lifecycle.heartbeats import WorkerDown
    from agentq.policies import Policy, load_policies
    from agentq.retry import OutcomeUnknown, PermanentError, RetryLater, RetryPolicy
    from agentq.run_info import RunInfo, RunStatus
    from agentq.runtime import Decision, Runtime
    from agentq.serializable import retry_serializable
    from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec
    from agentq.tools import ToolDef, ToolRegistry, tool

__version__ = "0.1.0"

#: Every public name is imported on first use (``from agentq import Runtime``
#: works as ever): ``import agentq`` costs nothing until then, so ``agentq --help``
#: and ``agentq --version`` answer at once and a Ctrl-C early in any command is
#: caught by the CLI, not shown as a traceback from the middle of an import.
_LAZY = {
    "Agent": "agentq.agents",
    "AgentQError": "agentq.errors",
    "ApprovalError": "agentq.errors",
    "ApprovalInfo": "agentq.approvals",
    "ApprovalNotice": "agentq.approvals",
    "ApprovalStatus": "agentq.statuses",
    "ApproverNotAllowed": "agentq.errors",
    "Backend": "agentq.backends",
    "BackendUnavailable": "agentq.errors",
    "BatchContext": "agentq.batching",
    "Checkpoint": "agentq.context",
    "Clock": "agentq.clock",
    "ConfigError": "agentq.errors",
    "DatabaseNotWritable": "agentq.errors",
    "Decision": "agentq.runtime",
    "DuplicateKey": "agentq.errors",
    "FakeClock": "agentq.clock",
    "FaultPoints": "agentq.faults",
    "IdempotencyConflict": "agentq.errors",
    "IllegalTransition": "agentq.errors",
    "InvalidArguments": "agentq.errors",
    "InvalidIdentifier": "agentq.errors",
    "InvalidMessage": "agentq.errors",
    "KeyColumn": "agentq.spec",
    "KeyType": "agentq.spec",
    "LEASE_SECONDS": "agentq.backends",
    "LeaseError": "agentq.errors",
    "Message": "agentq.backends",
    "MessageNotFound": "agentq.errors",
    "MissingExtra": "agentq.errors",
    "NotIdle": "agentq.errors",
    "OpenAICompatibleModel": "agentq.agents",
    "OutcomeUnknown": "agentq.retry",
    "PayloadTooLarge": "agentq.errors",
    "PayloadType": "agentq.spec",
    "PermanentError": "agentq.retry",
    "Policy": "agentq.policies",
    "PolicyViolation": "agentq.errors",
    "QueueNotFound": "agentq.errors",
    "QueueSpec": "agentq.spec",
    "QueueStats": "agentq.backends",
    "RedeliveryPolicy": "agentq.backends",
    "Renewal": "agentq.backends",
    "RetryLater": "agentq.retry",
    "RetryPolicy": "agentq.retry",
    "RunInfo": "agentq.run_info",
    "RunNotFound": "agentq.errors",
    "RunStatus": "agentq.statuses",
    "Runtime": "agentq.runtime",
    "SelfApprovalRefused": "agentq.errors",
    "SystemClock": "agentq.clock",
    "TaskInfo": "agentq.ledger",
    "TaskNotFound": "agentq.errors",
    "TaskStatus": "agentq.statuses",
    "ToolContext": "agentq.context",
    "ToolDef": "agentq.tools",
    "ToolError": "agentq.errors",
    "ToolRegistry": "agentq.tools",
    "Transaction": "agentq.backends",
    "TransactionAborted": "agentq.errors",
    "TransactionError": "agentq.errors",
    "UnknownTool": "agentq.errors",
    "Worker": "agentq.executor",
    "WorkerCrash": "agentq.faults",
    "WorkerDown": "agentq.lifecycle.heartbeats",
    "WorkerStats": "agentq.executor",
    "load_policies": "agentq.policies",
    "open_backend": "agentq.backends",
    "retry_serializable": "agentq.serializable",
    "tool": "agentq.tools",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentq' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    # Tab completion (a notebook's ``agentq.<Tab>``) lists the lazy names too.
    return sorted({*globals(), *_LAZY})


__all__ = [
    "LEASE_SECONDS",
    "Agent",
    "AgentQError",
    "ApprovalError",
    "ApprovalInfo",
    "ApprovalNotice",
    "ApprovalStatus",
    "ApproverNotAllowed",
    "Backend",
    "BackendUnavailable",
    "BatchContext",
    "Checkpoint",
    "Clock",
    "ConfigError",
    "DatabaseNotWritable",
    "Decision",
    "DuplicateKey",
    "FakeClock",
    "FaultPoints",
    "IdempotencyConflict",
    "IllegalTransition",
    "InvalidArguments",
    "InvalidIdentifier",
    "InvalidMessage",
    "KeyColumn",
    "KeyType",
    "LeaseError",
    "Message",
    "MessageNotFound",
    "MissingExtra",
    "NotIdle",
    "OpenAICompatibleModel",
    "OutcomeUnknown",
    "PayloadTooLarge",
    "PayloadType",
    "PermanentError",
    "Policy",
    "PolicyViolation",
    "QueueNotFound",
    "QueueSpec",
    "QueueStats",
    "RedeliveryPolicy",
    "Renewal",
    "RetryLater",
    "RetryPolicy",
    "RunInfo",
    "RunNotFound",
    "RunStatus",
    "Runtime",
    "SelfApprovalRefused",
    "SystemClock",
    "TaskInfo",
    "TaskNotFound",
    "TaskStatus",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolRegistry",
    "Transaction",
    "TransactionAborted",
    "TransactionError",
    "UnknownTool",
    "Worker",
    "WorkerCrash",
    "WorkerDown",
    "WorkerStats",
    "load_policies",
    "open_backend",
    "retry_serializable",
    "tool",
]
