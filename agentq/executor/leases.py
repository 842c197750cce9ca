"""Lease renewal: the monitor thread that keeps running tasks' leases alive.

Every ``monitor_interval`` the monitor renews the leases of tasks (running or
waiting for a handler) that expire within ``renew_margin`` seconds, about 7.5 s
into their 10 s, and hands handlers that overran their tool's timeout to
:meth:`~agentq.executor.timeouts.Timeouts._give_up`. A backend with shorter
leases (SQLite's or PostgreSQL's ``lease_seconds``) gets a margin and a tick of
their own by default (:func:`renewal_schedule`): half a 2 s lease, every 0.2 s.

The schedule is read on this machine's monotonic clock from when the lease was
granted (the receive stage's pessimistic estimate of the grant, see
:mod:`agentq.executor.lease_clock`, or the sending of the renewal that extended
it): the server's
expiry compared with a local wall clock 2 s behind would renew 2 s late. A
renewal that fails (the database unreachable, a dropped connection) leaves the
lease as it was and is tried again on the next tick; only an answer saying the
token cannot be renewed marks the lease lost: the task's completion will then
fail its strict ack if another delivery finished it meanwhile.
"""

from __future__ import annotations

import logging
from datetime import datetime

from agentq.executor.inflight import Inflight
from agentq.executor.state import WorkerState

__all__ = ["MONITOR_INTERVAL", "RENEW_MARGIN", "LeaseMonitor", "renewal_schedule"]

log = logging.getLogger("agentq.worker")

#: Seconds of a lease left when it is renewed, at most: 7.5 s into a 10 s lease.
RENEW_MARGIN = 2.5
#: Seconds between the monitor's ticks, at most.
MONITOR_INTERVAL = 0.5


def renewal_schedule(lease_seconds: float) -> tuple[float, float]:
    """The default ``(renew_margin, monitor_interval)`` of a worker whose backend's
    leases last ``lease_seconds``: :data:`RENEW_MARGIN` and
    :data:`MONITOR_INTERVAL` for Spanner's 10 s; for a shorter lease, at most half
    of it, checked five times in that half (a 2 s lease: renewed with 1 s left,
    every 0.2 s), so a renewal is due well before the lease runs out."""
    margin = min(RENEW_MARGIN, lease_seconds / 2)
    return margin, min(MONITOR_INTERVAL, margin / 5)


class LeaseMonitor(WorkerState):
    """The lease-renewal stage of a worker."""

    def _monitor_loop(self) -> None:
        while not self._stop.is_set():
            self.clock.wait(self._stop, self.monitor_interval)
            if self._stop.is_set():
                return
            try:
                self._monitor_once()
            except Exception:
                log.exception("lease monitor failed; retrying")

    def _monitor_once(self) -> None:
        now = self.clock.now()
        mono = self.clock.monotonic()
        due: dict[str, list[Inflight]] = {}
        with self._lock:
            inflight = list(self._inflight.values())
        for inf in inflight:
            if inf.deadline is not None and mono >= inf.deadline and not inf.timed_out:
                self._give_up(inf)
                continue
            renew = (inf.definition is None or inf.definition.renew_leases) and not inf.held_off
            lease_left = self._lease_left(inf, now, mono, self.runtime.backend.lease_seconds)
            if renew and not inf.lost and lease_left <= self.renew_margin:
                due.setdefault(inf.queue, []).append(inf)
        for queue, infs in due.items():
            self._renew(queue, infs)
        self.admission.key_slots.renew(inflight)

    @staticmethod
    def _lease_left(inf: Inflight, now: datetime, mono: float, lease_seconds: float) -> float:
        """Seconds of the lease (``lease_seconds`` long) left, on the local
        monotonic clock when known."""
        if inf.leased_at is not None:
            return lease_seconds - (mono - inf.leased_at)
        return (inf.lease_expiry - now).total_seconds()

    def _renew(self, queue: str, infs: list[Inflight]) -> None:
        sent_at = self.clock.monotonic()
        try:
            renewed = self.runtime.backend.renew(queue, [i.token for i in infs])
        except Exception as exc:
            # Outcome unknown: the leases are not known to be lost. Try again on
            # the next tick with the same tokens.
            self._count("renew_errors")
            log.warning("renewing %d lease(s) on %s failed (%r); retrying", len(infs), queue, exc)
            return
        rows = {r.old_token: r for r in renewed}
        for inf in infs:
            row = rows.get(inf.token)
            if row is None or row.new_token is None:
                inf.lost = True
                self._count("lease_lost")
                continue
            inf.token = row.new_token
            inf.lease_expiry = row.lease_expiry
            inf.leased_at = sent_at  # the server extended it after this moment
            self._count("renewed")
