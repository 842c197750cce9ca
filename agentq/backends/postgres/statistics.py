"""Planner statistics for agentq's tables when they outgrew them: a worker
about to serve a backlog analyzes the tables that have no statistics yet, or
have more than doubled since their last.

The statements of a worker's batch write sets of rows joined by ``unnest``
(its tasks' records swapped at completion, its leases, its acks). With no
statistics, PostgreSQL guesses that a fixed fraction of the ledger's rows
belong to each of its tables (``tbl``), and past a few dozen rows in the set it
hashes the set and reads every record of that table instead of looking each
up by its key: a completion of 64 tasks read all 5,000 of a fresh ledger
(``auto_explain``: "Bitmap Heap Scan on records ... rows=5000", 8 ms of server
CPU a batch; 40 % of the server's time on the worker's statements, measured
with ``pg_stat_statements``). Autovacuum analyzes such tables, but only at its
next visit (``autovacuum_naptime``, a minute by default), and the tables of a
new deployment, or a backlog that piled up while workers were down, are
served before it comes.

The check is one query on the catalog (each table's size now against its
pages at the last ``ANALYZE`` or ``VACUUM``), at most every
:data:`CHECK_INTERVAL` seconds per backend, on a thread of its own with its own
connection: a lease never waits for it. ``ANALYZE (SKIP_LOCKED)`` passes a
table another ``ANALYZE`` or ``VACUUM`` holds (autovacuum, another worker), and
tables the role may not analyze (owned by another role) are not asked for.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from agentq.backends.postgres.config import PostgresConfig
from agentq.backends.postgres.connection import connect

__all__ = ["CHECK_INTERVAL", "MIN_PAGES", "StatisticsKeeper", "stale_tables_sql"]

log = logging.getLogger("agentq.postgres")

#: Seconds between two checks of one backend (real time: it is the server's state).
CHECK_INTERVAL = 30.0
#: Tables smaller than this many pages are never analyzed by agentq: any plan
#: reads them in a moment.
MIN_PAGES = 16


def stale_tables_sql() -> str:
    """The query naming the schema's tables (``%s``: the schema) this role may
    analyze that are at least :data:`MIN_PAGES` pages and more than twice the
    size they had at their last statistics (never analyzed: ``relpages`` 0)."""
    return (
        "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' "
        "AND pg_has_role(c.relowner, 'MEMBER') "
        "AND pg_relation_size(c.oid) >= "
        f"{MIN_PAGES} * current_setting('block_size')::bigint "
        "AND pg_relation_size(c.oid) > 2 * c.relpages::bigint * "
        "current_setting('block_size')::bigint "
        "ORDER BY 1"
    )


class StatisticsKeeper:
    """Analyzes one schema's outgrown tables, in the background, when asked
    (:meth:`check_soon`) and :data:`CHECK_INTERVAL` has passed since the last
    check."""

    def __init__(self, config: PostgresConfig, interval: float = CHECK_INTERVAL) -> None:
        self._config = config
        self._interval = interval
        self._lock = threading.Lock()
        self._checked_at: float | None = None
        self._running: threading.Thread | None = None
        self.analyzed: list[str] = []  # tables analyzed so far (for tests and debugging)

    def check_soon(self) -> None:
        """Start a check unless one ran within the interval or is running."""
        now = time.monotonic()
        with self._lock:
            if self._running is not None and self._running.is_alive():
                return
            if self._checked_at is not None and now - self._checked_at < self._interval:
                return
            self._checked_at = now
            self._running = threading.Thread(
                target=self._check, name="agentq-postgres-statistics", daemon=True
            )
            self._running.start()

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a running check to end (tests, close)."""
        running = self._running
        if running is not None:
            running.join(timeout)

    def _check(self) -> None:
        try:
            conn = connect(self._config, name="agentq statistics")
        except Exception as exc:  # the server is away: the next check tries again
            log.debug("statistics check: cannot connect (%s)", type(exc).__name__)
            return
        try:
            tables = [row[0] for row in conn.execute(
                stale_tables_sql(), (self._config.schema,)
            ).fetchall()]  # fmt: skip
            for table in tables:
                conn.execute(f"ANALYZE (SKIP_LOCKED) {table}")
                self.analyzed.append(table)
                log.info("analyzed %s: it had outgrown its planner statistics", table)
        except psycopg.Error as exc:  # a lost connection, a dropped table: next time
            log.debug("statistics check failed (%s)", type(exc).__name__)
        finally:
            conn.close()
