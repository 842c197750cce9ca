"""agentq: run AI agents' tool calls reliably.

Decisions and the tool tasks they imply commit in one database transaction,
with the semantics of Google Cloud Spanner queues. The public API is exactly
``__all__``; everything else is private.
"""

from __future__ import annotations

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
from agentq.errors import (
    AgentQError,
    ApprovalError,
    BackendUnavailable,
    ConfigError,
    DuplicateKey,
    InvalidArguments,
    InvalidIdentifier,
    InvalidMessage,
    LeaseError,
    MessageNotFound,
    PayloadTooLarge,
    PolicyViolation,
    QueueNotFound,
    TaskNotFound,
    ToolError,
    TransactionAborted,
    TransactionError,
    UnknownTool,
)
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec

__version__ = "0.1.0"

__all__ = [
    "LEASE_SECONDS",
    "AgentQError",
    "ApprovalError",
    "Backend",
    "BackendUnavailable",
    "Clock",
    "ConfigError",
    "DuplicateKey",
    "FakeClock",
    "InvalidArguments",
    "InvalidIdentifier",
    "InvalidMessage",
    "KeyColumn",
    "KeyType",
    "LeaseError",
    "Message",
    "MessageNotFound",
    "PayloadTooLarge",
    "PayloadType",
    "PolicyViolation",
    "QueueNotFound",
    "QueueSpec",
    "QueueStats",
    "RedeliveryPolicy",
    "Renewal",
    "SystemClock",
    "TaskNotFound",
    "ToolError",
    "Transaction",
    "TransactionAborted",
    "TransactionError",
    "UnknownTool",
    "open_backend",
]
