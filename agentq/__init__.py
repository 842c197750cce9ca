"""agentq: run AI agents' tool calls reliably.

Decisions and the tool tasks they imply commit in one database transaction,
with the semantics of Google Cloud Spanner queues. The public API is exactly
``__all__``; everything else is private.
"""

import typing

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
from agentq.faults import FaultPoints, WorkerCrash
from agentq.ledger import TaskInfo, TaskStatus
from agentq.lifecycle.heartbeats import WorkerDown
from agentq.policies import Policy, load_policies
from agentq.retry import OutcomeUnknown, PermanentError, RetryLater, RetryPolicy
from agentq.run_info import RunInfo, RunStatus
from agentq.runtime import Decision, Runtime
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec
from agentq.tools import ToolDef, ToolRegistry, tool

if typing.TYPE_CHECKING:
    from agentq.executor import Worker, WorkerStats

__version__ = "0.1.0"

#: Imported on first use: the executor (and asyncio under it) is a sixth of
#: ``import agentq``, and a process that only decides never runs a worker.
_LAZY = {"Worker": "agentq.executor", "WorkerStats": "agentq.executor"}


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
    "tool",
]
