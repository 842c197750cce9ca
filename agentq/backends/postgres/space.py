"""``reclaim_space`` on PostgreSQL: the space deleted records left, given back to
the file system by a plain ``VACUUM`` of agentq's records table.

``VACUUM`` makes deleted rows' space reusable and truncates the empty pages at
the end of the table (and of its TOAST table), returning them to the operating
system. It blocks neither readers nor writers: truncation takes its short
exclusive lock only if no one waits for the table, and ``SKIP_LOCKED`` passes a
table another ``VACUUM`` (autovacuum, another worker) is already on. Autovacuum
runs the same ``VACUUM`` by itself, later; this is for a prune that wants the
space now (``agentq prune``). ``VACUUM FULL``, which rewrites the table under an
exclusive lock, is the operator's to run, never agentq's.

``VACUUM`` cannot stop at ``max_bytes``: what one gives back beyond it is
reported by the next calls without vacuuming again, so a caller that asks until
a call returns less than it asked for (the runtime's prune) sums to the whole.
"""

from __future__ import annotations

import threading

import psycopg

from agentq.backends.postgres.config import PostgresConfig
from agentq.backends.postgres.connection import connect
from agentq.backends.postgres.driver_errors import mapped

__all__ = ["SpaceReclaimer"]


class SpaceReclaimer:
    """Vacuums one table (``"schema"."records"``) on demand and reports what it
    gave back, ``max_bytes`` at a time."""

    def __init__(self, config: PostgresConfig, table: str) -> None:
        self._config = config
        self._table = table
        self._lock = threading.Lock()
        self._unreported = 0  # bytes given back that no call has reported yet

    def reclaim(self, max_bytes: int, keep_free: float) -> int:
        """The contract's ``reclaim_space``. With ``keep_free`` (a worker's periodic
        prune) the space stays for reuse: inserts fill it again, and autovacuum
        makes it reusable without agentq's help."""
        if max_bytes <= 0 or keep_free > 0:
            return 0
        with self._lock:
            if self._unreported == 0:
                self._unreported = self._vacuum()
            reported = min(self._unreported, max_bytes)
            self._unreported -= reported
            return reported

    def _vacuum(self) -> int:
        """Bytes the table (with its TOAST table and indexes) shrank by."""
        size = f"SELECT pg_total_relation_size('{self._table}')"
        conn = connect(self._config, name="agentq reclaim_space")  # autocommit: VACUUM needs it
        try:
            before = _one(conn.execute(size).fetchone())
            conn.execute(f"VACUUM (SKIP_LOCKED, TRUNCATE) {self._table}")
            after = _one(conn.execute(size).fetchone())
        except psycopg.Error as exc:
            raise mapped(exc, self._config.where, f"vacuuming {self._table}") from exc
        finally:
            conn.close()
        return max(before - after, 0)


def _one(row: tuple[object, ...] | None) -> int:
    return int(str(row[0])) if row is not None and row[0] is not None else 0
