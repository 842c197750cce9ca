"""Which psycopg error becomes which agentq error, naming what failed.

Mapped by SQLSTATE class, not by message text, except for the one case libpq
gives no SQLSTATE for: a connection that could not be made (refused, unknown
host, timed out, or refused by the server: a bad password, an unknown role or
database, no ``pg_hba.conf`` entry), which is told apart by its message. The psycopg exception is
kept as ``__cause__``; no raw driver traceback reaches the caller.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import errors as pgerr

from agentq.errors import (
    AgentQError,
    BackendUnavailable,
    ConfigError,
    DatabaseNotWritable,
    InvalidMessage,
    TransactionAborted,
    TransactionError,
)

__all__ = ["NOT_AS_PREPARED", "RETRYABLE", "first_line", "mapped"]

# What the server says when it refuses a connection (libpq passes no SQLSTATE).
_AUTH = re.compile(
    r"password authentication failed|role \S+ does not exist|no pg_hba\.conf entry"
    r"|authentication failed|no password supplied",
    re.I,
)
_NO_DATABASE = re.compile(r"database \S+ does not exist", re.I)

#: Transient conflicts: the whole transaction is re-run (with backoff).
RETRYABLE: tuple[type[Exception], ...] = (pgerr.SerializationFailure, pgerr.DeadlockDetected)
#: A prepared statement not as the server session holds it: missing, or the
#: name taken (:mod:`.prepared`; psycopg's own behind a transaction pooler).
NOT_AS_PREPARED: tuple[type[Exception], ...] = (
    pgerr.InvalidSqlStatementName,
    pgerr.DuplicatePreparedStatement,
)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def mapped(exc: Exception, where: str, doing: str) -> AgentQError:
    """The agentq error for ``exc``, raised while ``doing`` on the server ``where``."""
    message = first_line(exc)
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, RETRYABLE):
        kind = "deadlock" if isinstance(exc, pgerr.DeadlockDetected) else "serialization failure"
        return TransactionAborted(
            f"PostgreSQL at {where}: {doing} kept failing ({kind}), retries ran out: {message}"
        )
    if isinstance(exc, pgerr.InsufficientPrivilege):
        return DatabaseNotWritable(
            f"PostgreSQL at {where}: permission denied while {doing}: {message} (a role "
            "that may only read agentq's tables lists and shows, and may only read; one "
            "that changes them needs INSERT, UPDATE and DELETE on them, and one that "
            "creates them USAGE and CREATE on agentq's schema, or a schema it may create)"
        )
    if state.startswith("28") or (not state and _AUTH.search(str(exc))):
        # Invalid authorization: a bad password, no such role, no pg_hba.conf entry.
        return ConfigError(f"PostgreSQL at {where}: authentication failed: {message}")
    if state == "3D000" or (not state and _NO_DATABASE.search(str(exc))):
        return ConfigError(f"PostgreSQL at {where}: the database does not exist: {message}")
    if isinstance(exc, pgerr.QueryCanceled):
        return TransactionError(
            f"PostgreSQL at {where}: {doing} was cancelled (statement_timeout or a "
            f"cancel request), nothing committed: {message}"
        )
    if isinstance(exc, pgerr.ReadOnlySqlTransaction | pgerr.DiskFull):
        return DatabaseNotWritable(f"PostgreSQL at {where} refuses writes: {message}")
    if state.startswith(("08", "57P")) or isinstance(exc, psycopg.OperationalError):
        # Connection exceptions and an administrator's shutdown: the server is gone.
        reason = "connection refused" if "refused" in message.lower() else "connection failed"
        return BackendUnavailable(f"PostgreSQL at {where}: {reason} while {doing}: {message}")
    if isinstance(exc, NOT_AS_PREPARED):
        # Prepared on one server connection (.prepared); a pooler handed this
        # transaction another, without it or with another client's (PgBouncer in
        # transaction mode, without pooler=).
        return TransactionError(
            f"PostgreSQL at {where}: {doing} failed: {message} (behind a pooler in "
            "transaction mode, such as PgBouncer's pool_mode = transaction? add "
            "pooler=transaction to the database URL)"
        )
    if isinstance(exc, psycopg.DataError):
        return InvalidMessage(f"PostgreSQL at {where} refused a value while {doing}: {message}")
    return TransactionError(
        f"PostgreSQL at {where}: {doing} failed ({state or 'no SQLSTATE'}): {message}"
    )
