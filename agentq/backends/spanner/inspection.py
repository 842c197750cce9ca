"""``stats``: a queue's depth and health from SQL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentq.backends.base import QueueStats
from agentq.backends.spanner.api_errors import mapped_errors
from agentq.backends.spanner.wire import utc
from agentq.spec import QueueSpec

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["queue_stats"]


def queue_stats(backend: SpannerBackend, spec: QueueSpec) -> QueueStats:
    """Depth, ready and scheduled from the queue table. Leases, expirations and TTL
    drops are reported by Spanner's queue metrics in Cloud Monitoring, not by SQL,
    so they are None here."""
    with (
        mapped_errors(f"reading the statistics of {spec.name!r}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        [(total, ready, scheduled, oldest)] = list(
            snap.execute_sql(backend.dialect.stats_sql(spec))
        )
    # The oldest *ready* message (scheduled ones are not late); never negative, even
    # when this machine's clock is behind Spanner's.
    age = None if oldest is None else max(0.0, (backend.clock.now() - utc(oldest)).total_seconds())
    return QueueStats(
        queue=spec.name, depth=int(total), ready=int(ready), scheduled=int(scheduled),
        leased=None, backing_off=None, oldest_unacked_age=age, lease_expirations=None,
        ttl_dropped=None,
    )  # fmt: skip
