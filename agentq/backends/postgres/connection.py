"""The connection pool and the write and read paths over it.

One psycopg-pool :class:`~psycopg_pool.ConnectionPool` per backend. A
transaction of ``transact`` runs at SERIALIZABLE, as a Spanner read-write
transaction is: a record read and then written by two transactions side by
side is never a lost update, and the application's SQL gets the same
guarantee. Leasing and renewal run at READ COMMITTED: they touch only rows they
lock themselves (``FOR UPDATE [SKIP LOCKED]``), and SERIALIZABLE would only add
aborts between receivers. A serialization failure or deadlock re-runs the whole
function with jittered backoff, then surfaces as
:class:`~agentq.errors.TransactionAborted`. A connection the server dropped
while it sat in the pool is noticed when it is checked out (the pool's check),
so a restart of the server costs one failed check, not a failed transaction.

psycopg-pool replaces a lost connection in the background, waiting 1, 2, 4, 8 ...
seconds between failed attempts; uncapped, after an outage of T seconds its next
attempt came up to T seconds after the server was back (a 40 s restart left
every transaction failing for 19 s more). :class:`_Pool` caps that wait at
:data:`_RECONNECT_MAX`.

A connection lost while a transaction runs on it (the server restarted, failed
over, or ended the session) is told apart by *when*: before the COMMIT was sent,
the server rolls back everything the connection held, so the whole function is
re-run on another connection (the pool waits for the server to come back);
during the COMMIT the outcome is unknown, so it is never re-run and
:class:`~agentq.errors.BackendUnavailable` says the outcome is unknown.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg_pool.pool import AddConnection

from agentq.backends.postgres.config import PostgresConfig
from agentq.backends.postgres.driver_errors import RETRYABLE, first_line, mapped
from agentq.backends.postgres.schema import ensure_schema
from agentq.errors import AgentQError, BackendUnavailable

__all__ = ["Conn", "Database"]

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]

#: Runs of one function on serialization failures and deadlocks.
_ATTEMPTS = 8
#: Runs of one function whose connection was lost before its commit.
_LOST_ATTEMPTS = 4
#: Longest wait between the pool's attempts to replace a lost connection.
_RECONNECT_MAX = 1.0
_BACKOFF_BASE = 0.005  # real seconds: contention is between real transactions
_BACKOFF_MAX = 0.5
_CONNECT_TIMEOUT = 10  # seconds, when the URL sets no connect_timeout


def connect(config: PostgresConfig, *, autocommit: bool = True, name: str | None = None) -> Conn:
    """One connection outside the pool (setup, the listener), errors mapped;
    ``name`` is its ``application_name`` (what ``pg_stat_activity`` shows)."""
    extra: dict[str, Any] = {}
    if name is not None:
        extra["application_name"] = name
    if "connect_timeout" not in config.conninfo:
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    try:
        return psycopg.connect(config.conninfo, autocommit=autocommit, **extra)
    except psycopg.Error as exc:
        raise mapped(exc, config.where, "connecting") from exc


class _Pool(psycopg_pool.ConnectionPool):
    """psycopg-pool's pool, its waits between reconnection attempts capped.

    ``schedule_task`` is how the pool defers its next attempt to add a
    connection (``AddConnection``) after a failed one; other maintenance (the
    periodic shrink of idle connections) keeps its own schedule. The attempt's
    give-up time (``reconnect_timeout``) is unchanged."""

    def schedule_task(self, task: Any, delay: float) -> None:
        if isinstance(task, AddConnection):
            delay = min(delay, _RECONNECT_MAX)
        super().schedule_task(task, delay)


def _backoff(attempt: int) -> None:
    delay = min(_BACKOFF_BASE * 2 ** (attempt - 1), _BACKOFF_MAX)
    # Real time, not the backend's clock: the conflict is between real
    # transactions, and a test's fake clock does not move while it waits.
    time.sleep(random.uniform(0, delay))  # noqa: TID251  # full jitter


class Database:
    """The pool, the schema it was set up with, and the transaction runner."""

    def __init__(self, config: PostgresConfig) -> None:
        self.config = config
        self.closed = False
        setup = connect(config)  # surfaces refused / auth / no database clearly
        try:
            ensure_schema(setup, config.schema)
        except psycopg.Error as exc:
            raise mapped(exc, config.where, f"creating schema {config.schema!r}") from exc
        finally:
            setup.close()
        extra = {} if "connect_timeout" in config.conninfo else {"connect_timeout": 10}
        self._pool = _Pool(
            config.conninfo,
            min_size=1,
            max_size=config.pool_size,
            timeout=config.pool_timeout,
            kwargs=extra,
            check=psycopg_pool.ConnectionPool.check_connection,
            open=True,
            name=f"agentq {config.where}",
        )

    def _checkout(self, doing: str) -> Any:
        if self.closed:
            raise BackendUnavailable("backend is closed")
        return self._pool.connection()

    def write(
        self,
        fn: Callable[[Conn], T],
        doing: str = "running a transaction",
        *,
        durable: bool = True,
        serializable: bool = False,
    ) -> T:
        """Run ``fn(conn)`` inside one transaction, re-run on transient conflicts.

        ``durable=False`` commits without waiting for the WAL flush
        (``synchronous_commit = off`` for this transaction only): still atomic,
        lost only in a server crash, for bookkeeping whose loss only causes an
        earlier redelivery (leases, renewals). ``serializable`` runs it at
        SERIALIZABLE instead of READ COMMITTED (set in its BEGIN: no round trip).
        """
        level = (
            psycopg.IsolationLevel.SERIALIZABLE
            if serializable
            else psycopg.IsolationLevel.READ_COMMITTED
        )
        attempt = lost = 0
        while True:
            attempt += 1
            conn: Conn | None = None
            committing = False
            try:
                with self._checkout(doing) as conn:
                    if conn.isolation_level != level:
                        conn.isolation_level = level
                    with conn.transaction():
                        if not durable:
                            conn.execute("SET LOCAL synchronous_commit = off")
                        result = fn(conn)
                        committing = True  # the block's end sends COMMIT
                    return result
            except RETRYABLE as exc:
                if attempt >= _ATTEMPTS:
                    raise mapped(exc, self.config.where, doing) from exc
                _backoff(attempt)
            except AgentQError:
                raise
            except psycopg_pool.PoolTimeout as exc:
                raise BackendUnavailable(
                    f"PostgreSQL at {self.config.where}: no pooled connection free within "
                    f"{self.config.pool_timeout:g} s (pool_size={self.config.pool_size}; "
                    f"raise it in the URL, or the server is unreachable): {exc}"
                ) from exc
            except psycopg.OperationalError as exc:
                if conn is None or not conn.closed:
                    raise mapped(exc, self.config.where, doing) from exc
                # The connection is gone (the server restarted or ended it).
                if committing:
                    raise BackendUnavailable(
                        f"PostgreSQL at {self.config.where}: connection lost during the "
                        f"commit of {doing}; its outcome is unknown (it may have "
                        f"committed): {first_line(exc)}"
                    ) from exc
                lost += 1
                if lost >= _LOST_ATTEMPTS:
                    raise mapped(exc, self.config.where, doing) from exc
                _backoff(lost)  # then the pool gives a new connection, or waits for one
            except psycopg.Error as exc:
                raise mapped(exc, self.config.where, doing) from exc

    def read(self, fn: Callable[[Conn], T], doing: str = "reading") -> T:
        """Run ``fn(conn)`` in a read-only moment of one pooled connection."""
        return self.write(fn, doing)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._pool.close(timeout=5.0)
