"""A serving worker's heartbeat and its periodic stats line.

While :meth:`Worker.run` serves, a thread writes the worker's record in the
``workers`` table every ``interval`` seconds (through the backend's records,
in a non-durable transaction: losing one on power failure only makes the
worker look briefly absent) and deletes it on a clean stop; ``agentq
workers`` lists the records. Every ``stats_interval`` seconds it also logs
one INFO line of the worker's counters on ``agentq.worker``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentq.backends import Transaction
from agentq.ledger import Tables

if TYPE_CHECKING:
    from agentq.executor.worker import Worker

__all__ = ["Heartbeat"]

log = logging.getLogger("agentq.worker")

#: Heartbeats older than this are deleted by the next worker that starts.
FORGET_AFTER = timedelta(hours=1)


class Heartbeat:
    """Publishes ``worker``'s presence and logs its stats until :meth:`stop`."""

    def __init__(
        self, worker: Worker, interval: float = 5.0, stats_interval: float | None = 60.0
    ) -> None:
        self.worker = worker
        self.interval = interval
        self.stats_interval = stats_interval
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.started_at = worker.clock.now()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> dict[str, Any]:
        w = self.worker
        with w._lock:
            in_flight = len(w._inflight)
        with w._stats_lock:
            stats = dict(w.stats)
        return {
            "worker_id": self.worker_id, "host": socket.gethostname(), "pid": os.getpid(),
            "queues": list(w.queues), "concurrency": w.concurrency,
            "started_at": self.started_at.isoformat(),
            "heartbeat_at": w.clock.now().isoformat(), "in_flight": in_flight, "stats": stats,
        }  # fmt: skip

    def publish(self) -> None:
        """Write this worker's record now."""
        record = self._record()
        self.worker.runtime.backend.transact(
            lambda tx: tx.put_record(Tables.WORKERS, self.worker_id, record), durable=False
        )

    def _forget_old(self) -> None:
        backend = self.worker.runtime.backend
        cutoff = self.worker.clock.now() - FORGET_AFTER
        stale = [
            key for key, rec in backend.list_records(Tables.WORKERS, limit=1000)
            if _older(rec.get("heartbeat_at"), cutoff)
        ]  # fmt: skip

        def delete(tx: Transaction) -> None:
            for key in stale:
                tx.delete_record(Tables.WORKERS, key)

        if stale:
            backend.transact(delete, durable=False)

    def _loop(self) -> None:
        clock = self.worker.clock
        last_stats = clock.monotonic()
        while True:
            try:
                self.publish()
            except Exception as exc:  # the database failing: the worker reports that itself
                log.debug("heartbeat not written: %s", exc)
            if self.stats_interval is not None and (
                clock.monotonic() - last_stats >= self.stats_interval
            ):
                last_stats = clock.monotonic()
                self.log_stats()
            if clock.wait(self._stop, self.interval):
                return

    def log_stats(self) -> None:
        """One INFO line: the worker's counters and what is in flight."""
        record = self._record()
        counts = ", ".join(f"{k}={v}" for k, v in sorted(record["stats"].items())) or "nothing yet"
        log.info("worker stats: %d in flight; %s", record["in_flight"], counts,
                 extra={"stats": record["stats"], "in_flight": record["in_flight"]})  # fmt: skip

    def start(self) -> Heartbeat:
        """Start publishing (first forgetting heartbeats of long-gone workers)."""
        try:
            self._forget_old()
        except Exception as exc:
            log.debug("old heartbeats not deleted: %s", exc)
        self._thread = threading.Thread(target=self._loop, name="agentq-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop, log the stats a last time, and delete this worker's record (it
        stopped cleanly)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.stats_interval is not None:
            self.log_stats()
        try:
            self.worker.runtime.backend.transact(
                lambda tx: tx.delete_record(Tables.WORKERS, self.worker_id), durable=False
            )
        except Exception as exc:
            log.debug("heartbeat not deleted: %s", exc)


def _older(stamp: Any, cutoff: datetime) -> bool:
    try:
        return datetime.fromisoformat(str(stamp)) < cutoff
    except (TypeError, ValueError):
        return True
