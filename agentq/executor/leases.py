"""Lease renewal: the monitor thread that keeps running tasks' leases alive.

Every ``monitor_interval`` the monitor renews the leases of tasks (running or
waiting for a handler) that expire within ``renew_margin`` seconds, about 7.5 s
into their 10 s, and hands handlers that overran their tool's timeout to
:meth:`~agentq.executor.running.Running._give_up`. A lease that cannot be
renewed is marked lost: the task's completion will then fail its strict ack
if another delivery finished it meanwhile.
"""

from __future__ import annotations

import logging

from agentq.executor.inflight import Inflight
from agentq.executor.state import WorkerState

__all__ = ["LeaseMonitor"]

log = logging.getLogger("agentq.worker")


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
            renew = inf.definition is None or inf.definition.renew_leases
            if (
                renew
                and not inf.lost
                and (inf.lease_expiry - now).total_seconds() <= self.renew_margin
            ):
                due.setdefault(inf.queue, []).append(inf)
        for queue, infs in due.items():
            self._renew(queue, infs)

    def _renew(self, queue: str, infs: list[Inflight]) -> None:
        rows = {r.old_token: r for r in self.runtime.backend.renew(queue, [i.token for i in infs])}
        for inf in infs:
            row = rows.get(inf.token)
            if row is None or row.new_token is None:
                inf.lost = True
                self._count("lease_lost")
                continue
            inf.token = row.new_token
            inf.lease_expiry = row.lease_expiry
            self._count("renewed")
