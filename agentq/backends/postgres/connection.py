"""The connection pool and the write and read paths over it.

One psycopg-pool :class:`~psycopg_pool.ConnectionPool` per backend, of
connections in autocommit mode: a transaction is an explicit ``BEGIN`` ...
``COMMIT`` that :class:`~agentq.backends.postgres.pipeline.TxConn` sends with
as few round trips as it can, and a read is one statement on its own (at READ
COMMITTED every statement of a transaction takes a new snapshot anyway, so a
transaction around reads would only add two round trips). A transaction of
``transact`` runs at SERIALIZABLE, as a Spanner read-write transaction is: a
record read and then written by two transactions side by side is never a lost
update, and the application's SQL gets the same guarantee. Leasing and renewal
run at READ COMMITTED: they touch only rows they lock themselves (``FOR UPDATE
[SKIP LOCKED]``), and SERIALIZABLE would only add aborts between receivers. A
serialization failure or deadlock re-runs the whole function with jittered
backoff, then surfaces as :class:`~agentq.errors.TransactionAborted`.

A connection the server dropped while it sat in the pool is noticed when it is
checked out, so a restart of the server costs one failed check, not a failed
transaction. The check costs a round trip only when it can find something: the
connection has been idle for a while, or its socket has something to read (a
server that shuts down or ends the session says so before it closes the
socket); a connection handed back a moment ago with nothing to read is used as it is.

While the pool's attempts to connect keep failing, a checkout waits at most
:data:`_UNREACHABLE_WAIT` more (a quick restart is still ridden out), then
raises :class:`~agentq.errors.BackendUnavailable` saying the server cannot be
reached, instead of waiting out the whole ``pool_timeout`` (30 s: an HTTP
enqueue's 503 came that late).

psycopg-pool replaces a lost connection in the background; :mod:`.pool` caps
its waits between attempts and says in one line how long an outage lasted
(:class:`ConnectionOutage`).

A connection lost while a transaction runs on it (the server restarted, failed
over, or ended the session) is told apart by *when*: before the COMMIT was sent,
the server rolls back everything the connection held, so the whole function is
re-run on another connection (the pool waits for the server to come back);
during the COMMIT (which carries the writes held back for it) the outcome is
unknown, so it is never re-run and :class:`~agentq.errors.BackendUnavailable`
says the outcome is unknown. A read on a lost connection is simply read again.
"""

from __future__ import annotations

import logging
import random
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from agentq.backends.postgres import prepared
from agentq.backends.postgres.config import PostgresConfig
from agentq.backends.postgres.driver_errors import (
    NOT_AS_PREPARED,
    RETRYABLE,
    first_line,
    mapped,
)
from agentq.backends.postgres.pipeline import (
    BEGIN_READ_COMMITTED,
    BEGIN_SERIALIZABLE,
    Conn,
    TxConn,
)
from agentq.backends.postgres.pool import ConnectionOutage, Pool
from agentq.backends.postgres.schema import ensure_schema, wakeup_secret
from agentq.errors import AgentQError, BackendUnavailable

__all__ = [
    "ATTEMPTS",
    "LOST_ATTEMPTS",
    "Conn",
    "ConnectionOutage",
    "Database",
    "TxConn",
    "backoff",
    "outcome_unknown",
]

T = TypeVar("T")
log = logging.getLogger("agentq.backends.postgres")

#: Runs of one function on serialization failures and deadlocks.
ATTEMPTS = 8
#: Runs of one function whose connection was lost before its commit.
LOST_ATTEMPTS = 4
_BACKOFF_BASE = 0.005  # real seconds: contention is between real transactions
_BACKOFF_MAX = 0.5


def backoff(attempt: int) -> float:
    """The longest wait (seconds) after failed attempt ``attempt`` (full jitter:
    wait a uniform fraction of it)."""
    return float(min(_BACKOFF_BASE * 2 ** (attempt - 1), _BACKOFF_MAX))


_CONNECT_TIMEOUT = 10  # seconds, when the URL sets no connect_timeout
#: A pooled connection idle for longer is checked with a round trip on checkout.
_CHECK_AFTER_IDLE = 1.0
#: Once the pool's attempts to connect fail, longest further wait for a
#: connection (a quick restart is ridden out); then BackendUnavailable, not the
#: whole pool_timeout (an HTTP enqueue's 503 came after 30 s).
_UNREACHABLE_WAIT = 2.0
_WAIT_STEP = 0.5  # how often a checkout waiting for a connection looks at the outage


def connect(config: PostgresConfig, *, autocommit: bool = True, name: str | None = None) -> Conn:
    """One connection outside the pool (setup, the listener), errors mapped;
    ``name`` is its ``application_name`` (what ``pg_stat_activity`` shows)."""
    extra: dict[str, Any] = {}
    if name is not None:
        extra["application_name"] = name
    if "connect_timeout" not in config.conninfo:
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    extra.update(_pooler_options(config))
    try:
        return psycopg.connect(config.conninfo, autocommit=autocommit, **extra)
    except psycopg.Error as exc:
        raise mapped(exc, config.where, "connecting") from exc


def _pooler_options(config: PostgresConfig) -> dict[str, Any]:
    """psycopg's options for what sits in front of the server: behind a
    transaction-pooling pooler, no server-side prepared statements (psycopg
    prepares a statement run often, on one server connection; the next
    transaction may get another, without it)."""
    return {"prepare_threshold": None} if config.transaction_pooler else {}


def outcome_unknown(exc: BaseException, where: str, doing: str) -> BackendUnavailable:
    """The error for a connection lost during the COMMIT of ``doing``."""
    error = BackendUnavailable(
        f"PostgreSQL at {where}: connection lost during the commit of {doing}; its "
        f"outcome is unknown (it may have committed): {first_line(exc)}"
    )
    error.__cause__ = exc
    return error


class Database:
    """The pool, the schema it was set up with, and the transaction runner."""

    def __init__(self, config: PostgresConfig) -> None:
        self.config = config
        self.closed = False
        setup = connect(config)  # surfaces refused / auth / no database clearly
        try:
            ensure_schema(setup, config.schema)
            #: The secret part of the wake-up channel's name (None: poll only).
            self.wakeup_secret = wakeup_secret(setup, config.schema)
        except psycopg.Error as exc:
            raise mapped(exc, config.where, f"creating schema {config.schema!r}") from exc
        finally:
            setup.close()
        # No server-side prepared statements: psycopg prepares a statement in the
        # pipeline of its fifth run, and when a pipeline aborts (a serialization
        # failure of the statement before it) and the ROLLBACK makes psycopg clear
        # its cache, its DEALLOCATE ALL can drop a statement it prepared since:
        # "prepared statement _pg3_3 does not exist" (seen in the conformance
        # suite's concurrent read-then-write test). A transaction here is a few
        # statements over whole sets, so parsing each costs little.
        extra: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
        if "connect_timeout" not in config.conninfo:
            extra["connect_timeout"] = _CONNECT_TIMEOUT
        #: Whether the pool's connections prepare agentq's hot statements.
        self.prepares = prepared.Switch()
        self._returned: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._returned_lock = threading.Lock()
        self._outage = ConnectionOutage(config.where)
        self._pool = Pool(
            config.conninfo,
            min_size=1,
            max_size=config.pool_size,
            timeout=config.pool_timeout,
            kwargs=extra,
            check=self._check,
            open=True,
            name=f"agentq {config.where}",
            outage=self._outage,
            # agentq's hottest statements, prepared on each connection unless
            # a transaction-pooling pooler sits in front (:mod:`.prepared`).
            configure=None if config.transaction_pooler else self._prepare_on,
        )

    def _prepare_on(self, conn: Conn) -> None:
        """The pool's configure: ``conn`` prepares while :attr:`prepares` is on."""
        prepared.enable(conn, self.prepares)

    def _stop_preparing(self, exc: BaseException, prepared_on: bool) -> bool:
        """Turn preparing off for good if ``exc`` says a prepared statement was
        not what this connection's server session held (a transaction pooler
        agentq was not told of, or the application's ``DEALLOCATE``); whether
        the transaction that met it, begun while preparing was on
        (``prepared_on``), should run again."""
        if not isinstance(exc, NOT_AS_PREPARED) or not prepared_on:
            return False
        with self._returned_lock:
            was_on, self.prepares.on = self.prepares.on, False
        if not was_on:
            return True  # another thread's transaction met it first, and said so
        log.warning(
            "PostgreSQL at %s: %s; agentq no longer prepares statements on this "
            "database (behind a pooler in transaction mode, such as PgBouncer's "
            "pool_mode = transaction? add pooler=transaction to the database URL)",
            self.config.where, first_line(exc),
        )  # fmt: skip
        return True

    def _check(self, conn: Conn) -> None:
        """The pool's check on checkout (see the module docstring)."""
        with self._returned_lock:
            returned = self._returned.get(conn)
        if returned is not None and time.monotonic() - returned < _CHECK_AFTER_IDLE:
            try:
                readable, _, _ = select.select([conn.fileno()], [], [], 0)
            except (OSError, ValueError, psycopg.Error):
                readable = [True]
            if not readable:
                return  # used a moment ago, and the server has said nothing since
        psycopg_pool.ConnectionPool.check_connection(conn)

    @contextmanager
    def checkout(self, doing: str) -> Iterator[Conn]:
        """A pooled connection (in autocommit mode) for the block."""
        if self.closed:
            raise BackendUnavailable("backend is closed")
        conn = self._getconn(doing)
        try:
            with conn:  # as the pool's connection(): a pooled connection is not closed
                yield conn
        finally:
            with self._returned_lock:
                self._returned[conn] = time.monotonic()
            self._pool.putconn(conn)

    def _getconn(self, doing: str) -> Conn:
        """A connection from the pool within ``pool_timeout``, or within
        :data:`_UNREACHABLE_WAIT` of learning that the server cannot be reached."""
        now = time.monotonic()
        deadline = now + self.config.pool_timeout
        while True:
            down_for = self._outage.down_for
            if down_for is not None:
                deadline = min(deadline, now + _UNREACHABLE_WAIT)
            try:
                wait = max(deadline - time.monotonic(), 0.0)
                conn: Conn = self._pool.getconn(timeout=min(wait, _WAIT_STEP))
                return conn
            except psycopg_pool.PoolTimeout:
                now = time.monotonic()
                if now < deadline:
                    continue
                down_for = self._outage.down_for
                if down_for is None:
                    raise
                raise BackendUnavailable(
                    f"PostgreSQL at {self.config.where}: the server cannot be reached (the "
                    f"pool's attempts to connect have failed for {down_for:.1f} s) while "
                    f"{doing}; nothing was done"
                ) from None

    def write(
        self,
        fn: Callable[[TxConn], T],
        doing: str = "running a transaction",
        *,
        durable: bool = True,
        serializable: bool = False,
        attempts: int = ATTEMPTS,
    ) -> T:
        """Run ``fn(tx)`` inside one transaction, re-run on transient conflicts.

        ``durable=False`` commits without waiting for the WAL flush
        (``synchronous_commit = off`` for this transaction only): still atomic,
        lost only in a server crash, for bookkeeping whose loss only causes an
        earlier redelivery (leases, renewals). ``serializable`` runs it at
        SERIALIZABLE instead of READ COMMITTED (in its BEGIN). After ``attempts``
        conflicts the last is raised as :class:`~agentq.errors.TransactionAborted`.
        """
        begin = BEGIN_SERIALIZABLE if serializable else BEGIN_READ_COMMITTED
        attempt = lost = 0
        while True:
            attempt += 1
            conn: Conn | None = None
            committing = False
            prepared_on = self.prepares.on
            try:
                with self.checkout(doing) as conn:
                    tx = TxConn(conn, begin)
                    try:
                        result = fn(tx)
                        committing = True  # the COMMIT, with what was held back for it
                        tx.commit(durable=durable)
                    except BaseException:
                        if not conn.closed:
                            try:
                                tx.rollback()
                            except psycopg.Error:
                                pass  # a broken connection: the server rolled back
                        raise
                    return result
            except RETRYABLE as exc:
                if attempt >= attempts:
                    raise mapped(exc, self.config.where, doing) from exc
                # Real time, not the backend's clock: the conflict is between real
                # transactions, and a test's fake clock does not move while it waits.
                time.sleep(random.uniform(0, backoff(attempt)))  # noqa: TID251  # full jitter
            except NOT_AS_PREPARED as exc:
                # Nothing of it committed (the server aborted the transaction):
                # once, it runs again without prepared statements.
                if not self._stop_preparing(exc, prepared_on):
                    raise mapped(exc, self.config.where, doing) from exc
            except AgentQError:
                raise
            except psycopg_pool.PoolTimeout as exc:
                raise self.pool_exhausted(exc) from exc
            except psycopg.OperationalError as exc:
                if conn is None or not conn.closed:
                    raise mapped(exc, self.config.where, doing) from exc
                # The connection is gone (the server restarted or ended it).
                if committing:
                    raise outcome_unknown(exc, self.config.where, doing) from exc
                lost += 1
                if lost >= LOST_ATTEMPTS:
                    raise mapped(exc, self.config.where, doing) from exc
                # Then the pool gives a new connection, or waits for one.
                time.sleep(random.uniform(0, backoff(lost)))  # noqa: TID251
            except psycopg.Error as exc:
                raise mapped(exc, self.config.where, doing) from exc

    def read(self, fn: Callable[[Conn], T], doing: str = "reading") -> T:
        """Run ``fn(conn)`` on a pooled connection in autocommit mode: each of its
        statements reads what was committed when it started (no transaction). A
        read whose connection was lost runs again on another."""
        for lost in range(1, LOST_ATTEMPTS + 1):
            conn: Conn | None = None
            try:
                with self.checkout(doing) as conn:
                    return fn(conn)
            except AgentQError:
                raise
            except psycopg_pool.PoolTimeout as exc:
                raise self.pool_exhausted(exc) from exc
            except psycopg.OperationalError as exc:
                if conn is None or not conn.closed or lost == LOST_ATTEMPTS:
                    raise mapped(exc, self.config.where, doing) from exc
                time.sleep(random.uniform(0, backoff(lost)))  # noqa: TID251
            except psycopg.Error as exc:
                raise mapped(exc, self.config.where, doing) from exc
        raise AssertionError("unreachable")  # the loop returns or raises

    def pool_exhausted(self, exc: psycopg_pool.PoolTimeout) -> BackendUnavailable:
        """The error for a pool with no connection free in time."""
        return BackendUnavailable(
            f"PostgreSQL at {self.config.where}: no pooled connection free within "
            f"{self.config.pool_timeout:g} s (pool_size={self.config.pool_size}; "
            f"raise it in the URL, or the server is unreachable): {exc}"
        )

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._pool.close(timeout=5.0)
