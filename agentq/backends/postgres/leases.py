"""Leases on PostgreSQL: leasing ready messages, renewal, TTL drops and the
per-queue counters and stats built on them. The tokens (prefixed ``aqp1``), the
new lease of a leased row and a renewal's decision are shared with SQLite
(:mod:`agentq.backends.lease_rows`); this module owns PostgreSQL's SQL and
transactions around them. Leasing
selects the ready rows ``FOR UPDATE SKIP LOCKED``: receivers running side by
side each take different messages and never wait for one another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.backends.base import LeaseClaim, Message, QueueStats, RedeliveryPolicy, Renewal
from agentq.backends.lease_rows import lease_updates, leased_messages, queue_stats, renewals
from agentq.backends.postgres.connection import Conn, Database, TxConn
from agentq.backends.postgres.queues import QueueSQL, decode_or_raw
from agentq.backends.postgres.records import Records
from agentq.backends.postgres.schema import qualified
from agentq.clock import Clock, to_micros
from agentq.spec import QueueSpec

__all__ = ["Leases"]

_TOKEN_PREFIX = "aqp1"
#: For the lease's own transaction only (agentq's statements, nobody else's).
_GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"


def _count_sql(schema: str, queue: str, column: str, n: int) -> tuple[str, tuple[str, int]]:
    table = qualified(schema, "queue_counters")
    return (
        f"INSERT INTO {table} AS c (queue, {column}) VALUES (%s, %s) "
        f"ON CONFLICT (queue) DO UPDATE SET {column} = c.{column} + excluded.{column}",
        (queue, n),
    )


def _count(conn: Conn, schema: str, queue: str, column: str, n: int) -> None:
    conn.execute(*_count_sql(schema, queue, column, n))


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

    def _now(self) -> int:
        return to_micros(self._clock.now())

    def lease(
        self,
        sql: QueueSQL,
        max_batch_size: int,
        claim: LeaseClaim | None = None,
        records: Records | None = None,
        *,
        want_next_visible: bool = True,
    ) -> tuple[list[Message], int | None]:
        """Lease up to ``max_batch_size`` ready messages; also return the next
        time a message becomes visible when none is ready (unless not
        ``want_next_visible``: a one-shot receive, which waits for none, does not read
        it; None then). With ``claim`` (and the
        ``records`` it reads), each message's record is read with the ready rows
        and the swaps it asks for go with the lease's COMMIT (see
        :class:`~agentq.backends.base.LeaseClaim`): two round trips in all."""
        spec = sql.spec
        queue = spec.name
        nkeys = len(spec.key)
        policy = self._redelivery

        def body(tx: TxConn) -> tuple[list[Message], int | None, Any]:
            conn = tx.sql
            now = self._now()
            self._maybe_sweep_ttl(conn, sql, now)
            # The lease's SELECT is prepared (.prepared): its generic plan (the
            # index on the visible-at time, then LIMIT) is the one it needs, but
            # the server's cost estimate kept planning it anew at every call.
            tx.defer(_GENERIC_PLANS, None)
            if claim is not None:
                select = sql.select_ready_with_record
                params: tuple[Any, ...] = (claim.table, now, max_batch_size)
            else:
                select, params = sql.select_ready, (now, max_batch_size)
            rows = tx.execute_inlined(select, params).fetchall()
            if not rows:
                if not want_next_visible:
                    return [], None, None
                found = conn.execute(sql.next_visible).fetchone()
                return [], None if found is None else found[0], None
            updates, expired, expiry = lease_updates(rows, nkeys, now, policy, self._lease_micros)
            # One statement for the batch, sent with the COMMIT (one round trip).
            tx.before_commit(sql.update_leases, [list(col) for col in zip(*updates, strict=True)])
            if expired:
                tx.before_commit(*_count_sql(sql.schema, queue, "lease_expirations", expired))
            messages = self._messages(spec, rows, expiry)
            settle = None
            if claim is not None and records is not None:
                stored = {
                    str(row[1]): records.stored(row[-1]) for row in rows if row[-1] is not None
                }
                items = claim.prepare(messages, stored)
                if items:
                    settle = records.swap_at_commit(tx, claim.table, items)
            return messages, None, settle

        messages, next_visible, settle = self._db.write(
            body, f"leasing from queue {queue!r}", durable=False
        )
        if claim is not None and messages:
            claim.settled(settle() if settle is not None else [])
        return messages, next_visible

    @staticmethod
    def _messages(spec: QueueSpec, rows: list[Any], expiry: int) -> list[Message]:
        return leased_messages(_TOKEN_PREFIX, spec, rows, expiry, decode_or_raw)

    def _maybe_sweep_ttl(self, conn: Conn, sql: QueueSQL, now: int) -> None:
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
            _count(conn, sql.schema, sql.spec.name, "ttl_dropped", dropped)

    def renew(self, sql: QueueSQL, tokens: Sequence[str]) -> list[Renewal]:
        """RENEWLEASE: see :meth:`agentq.backends.base.Backend.renew` for the rows."""
        queue = sql.spec.name

        def body(tx: TxConn) -> list[Renewal]:
            conn = tx.sql
            return renewals(
                _TOKEN_PREFIX, queue, tokens, self._now(), self._redelivery, self._lease_micros,
                lambda msg_id: conn.execute(sql.select_for_renew, (msg_id,)).fetchone(),
                lambda params: conn.execute(sql.update_lease, params),
            )  # fmt: skip

        return self._db.write(body, f"renewing leases of queue {queue!r}", durable=False)

    def stats(self, sql: QueueSQL) -> QueueStats:
        """Depth, ready, scheduled, leased, oldest age and the counters."""
        queue = sql.spec.name
        now = self._now()
        counters_table = qualified(sql.schema, "queue_counters")

        def read(conn: Conn) -> tuple[tuple[Any, ...], tuple[int, int]]:
            row = conn.execute(sql.stats, {"now": now}).fetchone()
            counters = conn.execute(
                f"SELECT lease_expirations, ttl_dropped FROM {counters_table} WHERE queue = %s",
                (queue,),
            ).fetchone() or (0, 0)
            assert row is not None  # an aggregate always returns one row
            return row, (int(counters[0]), int(counters[1]))

        row, counters = self._db.read(read, f"reading the stats of queue {queue!r}")
        return queue_stats(queue, now, row, counters)
