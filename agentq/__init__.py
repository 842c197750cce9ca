"""agentq: run AI agents' tool calls reliably.

Decisions and the tool tasks they imply commit in one database transaction,
with the semantics of Google Cloud Spanner queues. The public API is exactly
``__all__``; everything else is private.
"""

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
from agentq.retry import PermanentError, RetryLater, RetryPolicy
from agentq.runtime import Decision, Runtime
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec
from agentq.tools import ToolDef, ToolRegistry, tool

__version__ = "0.1.0"

__all__ = [
    "LEASE_SECONDS",
    "AgentQError",
    "ApprovalError",
    "ApprovalInfo",
    "ApprovalNotice",
    "ApprovalStatus",
    "ApproverNotAllowed",
    "Backend",
    "BackendUnavailable",
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
    "Runtime",
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
