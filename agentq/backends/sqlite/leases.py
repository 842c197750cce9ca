"""Leases: leasing ready messages, renewal, TTL drops and the per-queue
counters and stats built on them. The tokens, the new lease of a leased row and
a renewal's decision are the SQL backends' shared
:mod:`agentq.backends.lease_rows`; this module owns SQLite's SQL and
transactions around them (tokens prefixed ``aq1``).

A queue whose last lease found nothing is *idle*: its next lease first looks
for a ready message with a plain read and takes the write lock only if there
is one. Receivers of idle queues are woken by every commit to the file (the
watcher cannot tell which table changed), and without the read each wake-up
would be a write transaction that every other writer waits for: a worker
serving four queues, one of them busy, ran at 0.58x one serving only that one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from agentq.backends.base import Message, QueueStats, RedeliveryPolicy, Renewal
from agentq.backends.lease_rows import lease_updates, leased_messages, queue_stats, renewals
from agentq.backends.sqlite.connection import Database
from agentq.backends.sqlite.queues import QueueSQL, decode_or_raw
from agentq.clock import Clock, to_micros

__all__ = ["Leases"]

_TOKEN_PREFIX = "aq1"


def _count(conn: sqlite3.Connection, queue: str, column: str, n: int) -> None:
    conn.execute(
        f"INSERT INTO agentq_queue_counters (queue, {column}) VALUES (?, ?) "
        f"ON CONFLICT (queue) DO UPDATE SET {column} = {column} + excluded.{column}",
        (queue, n),
    )


class Leases:
    """Lease (for ``lease_seconds``), renew and count on one database; time from ``clock``."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        redelivery: RedeliveryPolicy,
        ttl_sweep_interval: float,
        lease_seconds: float,
    ) -> None:
        self._db = db
        self._clock = clock
        self._redelivery = redelivery
        self._lease_micros = int(lease_seconds * 1_000_000)
        self._ttl_sweep_interval = ttl_sweep_interval
        self._last_sweep: dict[str, float] = {}
        # Queues whose last lease found nothing ready (see the module docstring).
        self._idle: set[str] = set()

    def _now(self) -> int:
        return to_micros(self._clock.now())

    def lease(self, sql: QueueSQL, max_batch_size: int) -> tuple[list[Message], int | None]:
        """Lease up to ``max_batch_size`` ready messages; also return the next
        time a message becomes visible when none is ready."""
        spec = sql.spec
        queue = spec.name
        nkeys = len(spec.key)
        policy = self._redelivery
        if queue in self._idle and spec.ttl is None:
            # A read instead of a write transaction while the queue stays empty
            # (a TTL queue leases as before: its sweep runs inside the lease).
            now = self._now()
            ready, next_visible = self._db.read(
                lambda conn: (
                    conn.execute(sql.any_ready, (now,)).fetchone() is not None,
                    conn.execute(sql.next_visible).fetchone()[0],
                )
            )
            if not ready:
                return [], next_visible

        def body(conn: sqlite3.Connection) -> tuple[list[Any], int, int | None]:
            now = self._now()
            self._maybe_sweep_ttl(conn, sql, now)
            rows = conn.execute(sql.select_ready, (now, max_batch_size)).fetchall()
            if not rows:
                return [], now, conn.execute(sql.next_visible).fetchone()[0]
            updates, expired, expiry = lease_updates(rows, nkeys, now, policy, self._lease_micros)
            conn.executemany(sql.update_lease, updates)
            if expired:
                _count(conn, queue, "lease_expirations", expired)
            return rows, expiry, None

        rows, expiry, next_visible = self._db.write(body, durable=False)
        if rows:
            self._idle.discard(queue)
        else:
            self._idle.add(queue)
        # Messages are built after COMMIT: decoding payloads and encoding tokens need
        # not hold the write lock that every other writer is waiting for.
        messages = leased_messages(_TOKEN_PREFIX, spec, rows, expiry, decode_or_raw)
        return messages, next_visible

    def _maybe_sweep_ttl(self, conn: sqlite3.Connection, sql: QueueSQL, now: int) -> None:
        ttl = sql.spec.ttl
        if ttl is None:
            return
        mono = self._clock.monotonic()
        last = self._last_sweep.get(sql.spec.name)
        if last is not None and mono - last < self._ttl_sweep_interval:
            return
        self._last_sweep[sql.spec.name] = mono
        cutoff = now - int(ttl.total_seconds() * 1_000_000)
        dropped = conn.execute(sql.ttl_delete, (cutoff,)).rowcount
        if dropped:
            _count(conn, sql.spec.name, "ttl_dropped", dropped)

    def renew(self, sql: QueueSQL, tokens: Sequence[str]) -> list[Renewal]:
        """RENEWLEASE: see :meth:`agentq.backends.base.Backend.renew` for the rows."""

        def body(conn: sqlite3.Connection) -> list[Renewal]:
            return renewals(
                _TOKEN_PREFIX, sql.spec.name, tokens, self._now(), self._redelivery,
                self._lease_micros,
                lambda msg_id: conn.execute(sql.select_by_id, (msg_id,)).fetchone(),
                lambda params: conn.execute(sql.update_lease, params),
            )  # fmt: skip

        return self._db.write(body, durable=False)

    def stats(self, sql: QueueSQL) -> QueueStats:
        """Depth, ready, scheduled, leased, oldest age and the counters."""
        queue = sql.spec.name
        now = self._now()

        def read(conn: sqlite3.Connection) -> tuple[tuple[Any, ...], tuple[int, int]]:
            row = conn.execute(sql.stats, {"now": now}).fetchone()
            counters = conn.execute(
                "SELECT lease_expirations, ttl_dropped FROM agentq_queue_counters WHERE queue = ?",
                (queue,),
            ).fetchone() or (0, 0)
            return row, counters

        row, counters = self._db.read(read)
        return queue_stats(queue, now, row, counters)
