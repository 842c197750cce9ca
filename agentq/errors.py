"""agentq's exceptions.

Every error agentq raises derives from :class:`AgentQError`. Driver errors
(``sqlite3``, ``google.api_core``) are mapped once, in their backend, to the most
specific class here, with the original kept as ``__cause__``.

::

    AgentQError
    ├── ConfigError                  bad configuration, URL, policy or tools file
    ├── InvalidIdentifier            a queue/column/table name that is not a safe SQL identifier
    ├── InvalidMessage               a key or payload that does not fit the queue's spec
    │   └── PayloadTooLarge
    ├── QueueNotFound
    ├── TransactionError             the transaction did not commit
    │   ├── DuplicateKey             send of a key that already exists
    │   ├── MessageNotFound          ack(must_exist=True) of a missing message (stale worker)
    │   └── TransactionAborted       retries of a transient abort were exhausted
    ├── LeaseError                   a lease could not be used (expired, lost)
    ├── BackendUnavailable           the database cannot be reached or opened
    │   └── DatabaseNotWritable      read-only, full or unwritable: writes fail until fixed
    ├── ToolError
    │   ├── UnknownTool
    │   └── InvalidArguments         an agent's arguments failed validation
    ├── PolicyViolation              the executor refused what a policy forbids
    ├── TaskNotFound
    ├── RunNotFound                  no durable agent run with this id
    ├── IllegalTransition            an event the task's (or approval's) state does not allow
    │   └── ApprovalError            unknown approval, or already decided / void
    │       └── ApprovalNotFound     no approval with this id
    │       └── ApprovalChanged      the approval changed since the version the decider saw
    │       └── ApproverNotAllowed   the decider is not among the rule's approvers
    │           └── SelfApprovalRefused  four eyes: the decider enqueued the call
    └── IdempotencyConflict          an idempotency key reused with other args or another tool
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "DISTRIBUTION",
    "AgentQError",
    "ApprovalChanged",
    "ApprovalError",
    "ApprovalNotFound",
    "ApproverNotAllowed",
    "BackendUnavailable",
    "ConfigError",
    "DatabaseNotWritable",
    "DuplicateKey",
    "IdempotencyConflict",
    "IllegalTransition",
    "InvalidArguments",
    "InvalidIdentifier",
    "InvalidMessage",
    "LeaseError",
    "MessageNotFound",
    "MissingExtra",
    "NotIdle",
    "PayloadTooLarge",
    "PolicyViolation",
    "QueueNotFound",
    "RunNotFound",
    "SelfApprovalRefused",
    "SharedTransactionError",
    "TaskNotFound",
    "ToolError",
    "TransactionAborted",
    "TransactionError",
    "UnknownTool",
    "install_hint",
]


class AgentQError(Exception):
    """Base class of every agentq error."""


class ConfigError(AgentQError):
    """Configuration, URL, policy file or tools directory is invalid."""


class InvalidIdentifier(AgentQError, ValueError):
    """A name is not a valid SQL identifier (letters, digits, underscore; not starting
    with a digit; at most 128 characters; not reserved for agentq)."""


class InvalidMessage(AgentQError, ValueError):
    """A message key or payload does not match the queue's spec."""


class PayloadTooLarge(InvalidMessage):
    """A payload is larger than the queue's limit."""


class QueueNotFound(AgentQError):
    """The queue has not been created in this database."""


class TransactionError(AgentQError):
    """The transaction did not commit; none of its writes were applied."""


class DuplicateKey(TransactionError):
    """A message with this key already exists in the queue."""


class MessageNotFound(TransactionError):
    """ack(must_exist=True) found no message: it was already acknowledged
    (typically by another delivery after this worker's lease expired)."""


class TransactionAborted(TransactionError):
    """The transaction kept aborting on transient conflicts and retries ran out."""


class LeaseError(AgentQError):
    """A lease is no longer held."""


class BackendUnavailable(AgentQError):
    """The database cannot be opened or reached."""


class DatabaseNotWritable(BackendUnavailable):
    """The database refuses writes (read-only file or mount, disk full, no
    permission): retrying will not help until an operator acts."""


class ToolError(AgentQError):
    """A tool is unknown or was called wrongly."""


class UnknownTool(ToolError, LookupError):
    """No tool with this name is registered."""


class InvalidArguments(ToolError, ValueError):
    """An agent's arguments for a tool failed validation. ``problems`` are the
    bad fields, each as its path in the arguments and what is wrong (empty when
    the arguments as a whole are refused)."""

    def __init__(
        self, message: str, *, problems: Sequence[tuple[Sequence[int | str], str]] = ()
    ) -> None:
        super().__init__(message)
        self.problems = [(tuple(path), detail) for path, detail in problems]


class PolicyViolation(AgentQError):
    """A policy forbids this action (host not allowed, approval required, ...)."""


class TaskNotFound(AgentQError, LookupError):
    """No task with this id exists."""


class RunNotFound(AgentQError, LookupError):
    """No durable agent run with this id exists."""


class IllegalTransition(AgentQError):
    """The lifecycle refused an event: the task (or approval) is in a state that
    does not allow it. The message names the task, its state and the event."""


class ApprovalError(IllegalTransition):
    """The approval does not exist, has already been decided, or is void (its
    task was cancelled)."""


class ApprovalNotFound(ApprovalError, LookupError):
    """No approval with this id exists."""


class ApprovalChanged(ApprovalError):
    """An approve or reject named the version of the approval it was shown, and
    the approval has changed since (escalated, decided, voided): nothing was decided."""


class ApproverNotAllowed(ApprovalError):
    """The decider is not among the approvers the approval's rule (or, for edited
    arguments, the rule those fall under) names; nothing was decided."""


class SelfApprovalRefused(ApproverNotAllowed):
    """Four eyes: the decider enqueued the call it would approve or reject, and
    its rule (``rule``, its name) does not say ``self_approval = true`` — the
    rule it was asked under, or the one its approver's edited arguments fall
    under; nothing was decided."""

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule


class IdempotencyConflict(AgentQError):
    """An idempotency key was reused with different arguments or for another
    tool; the message names the task the key belongs to."""


class NotIdle(AgentQError):
    """:meth:`Runtime.run_until_idle` hit its step bound with timers still due: a
    task that retries or reschedules itself forever, or a bound set too low."""


#: agentq's name on the package index. The index's ``agentq`` is an unrelated
#: project: every install hint names this one (the import package and the
#: command stay ``agentq``).
DISTRIBUTION = "agentq-runtime"


def install_hint(extra: str) -> str:
    """The command that installs agentq with an optional ``extra``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class SharedTransactionError(AgentQError):
    """``Runtime.decision(connection)`` cannot join the application's transaction:
    the object is not a connection or session agentq can use, it is not in a
    transaction that it commits itself, its database is not the runtime's, or the
    runtime's backend commits only through connections of its own (SQLite, Spanner)."""


class MissingExtra(AgentQError, ImportError):
    """An optional dependency is not installed; the message names the extra
    (``pip install 'agentq-runtime[notebook]'``)."""

    @classmethod
    def needed_by(cls, what: str, extra: str, missing: str | None = None) -> MissingExtra:
        """``what`` (``"agentq serve"``) needs ``extra``; ``missing`` is the module
        that could not be imported."""
        detail = f" (no module named {missing!r})" if missing else ""
        return cls(f"{what} needs the {extra!r} extra: {install_hint(extra)}{detail}")
