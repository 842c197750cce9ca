"""Database server restarts during a chaos run, and whether everything came back.

An :class:`Outage` stops the server (``pg_ctl stop -m fast``, then in the next
one ``-m immediate``), keeps it down a few seconds and starts it again, in a
thread of its own while the agent keeps deciding. Meanwhile the supervisor
kills nobody: the workers alive when the server stopped (the *survivors*) and
the HTTP server must come back **by themselves**, without being restarted. An
outage ends once each survivor applied a charge after the server was back and
the HTTP server accepted an enqueue after it, or after ``recovery_bound``
seconds; :func:`outage_problems` names each one that did not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.chaos.http_producer import HttpProducer
from tests.chaos.targets import Target
from tests.chaos.workers import Supervisor

__all__ = ["Outage", "Outages", "outage_problems"]

Log = Callable[[str], None]
_READY_SECONDS = 30.0


@dataclass
class Outage:
    """One restart of the database server and what came back after it."""

    mode: str
    stopped_at: float = 0.0  # monotonic: the stop began
    back_at: float = 0.0  # the server accepts connections again
    survivors: list[int] = field(default_factory=list)  # worker pids alive at the stop
    #: Seconds from back_at to each survivor's first charge (None: none in time).
    workers_back: dict[int, float | None] = field(default_factory=dict)
    http_back: float | None = None  # seconds from back_at to the first accepted enqueue
    error: str | None = None  # the restart itself failed

    def summary(self) -> str:
        workers = ", ".join(
            f"{pid}: {'never' if back is None else f'{back:.1f}s'}"
            for pid, back in self.workers_back.items()
        )
        http = "n/a" if self.http_back is None else f"{self.http_back:.1f}s"
        return (
            f"restart -m {self.mode}: down {self.back_at - self.stopped_at:.1f}s; "
            f"workers back after [{workers}]; HTTP enqueue back after {http}"
        )


class Outages:
    """Runs the scheduled restarts; :meth:`due` starts the next one when its time came."""

    def __init__(
        self,
        target: Target,
        supervisor: Supervisor,
        producer: HttpProducer | None,
        last_charge: dict[int, float],
        schedule: list[tuple[float, str]],  # (seconds into the kill phase, mode)
        *,
        down_seconds: float,
        recovery_bound: float,
        log: Log,
    ) -> None:
        self._target = target
        self._supervisor = supervisor
        self._producer = producer
        self._last_charge = last_charge  # worker pid -> monotonic time of its last charge
        self._schedule = sorted(schedule)
        self._down = down_seconds
        self._bound = recovery_bound
        self._log = log
        self.done: list[Outage] = []
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """A restart, or the wait for what it stopped to come back, is under way."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def pending(self) -> int:
        return len(self._schedule) + self.busy

    def due(self, elapsed: float) -> None:
        if self.busy or not self._schedule or elapsed < self._schedule[0][0]:
            return
        _, mode = self._schedule.pop(0)
        outage = Outage(mode)
        self.done.append(outage)
        self._supervisor.paused.set()  # before the survivors are counted
        self._thread = threading.Thread(
            target=self._run, args=(outage,), name=f"chaos-restart-{mode}"
        )
        self._thread.start()

    def _run(self, outage: Outage) -> None:
        try:
            outage.survivors = self._serving_workers()
            outage.stopped_at = time.monotonic()
            self._log(f"restarting the database server (-m {outage.mode})")
            try:
                self._target.restart(outage.mode, self._down)
            except Exception as exc:
                outage.error = f"{type(exc).__name__}: {exc}"
                return
            outage.back_at = time.monotonic()
            self._await_recovery(outage)
            self._log(outage.summary())
        finally:
            self._supervisor.paused.clear()

    def _serving_workers(self) -> list[int]:
        """The workers alive, once each has served (applied a charge since it
        started), bounded by :data:`_READY_SECONDS`: a worker still opening its
        database when the server stops fails to start, as it should, and that
        is not what the restart tests."""
        deadline = time.monotonic() + _READY_SECONDS
        while True:
            alive = self._supervisor.alive_since()
            starting = [p for p, born in alive.items() if self._last_charge.get(p, 0.0) <= born]
            if not starting or time.monotonic() > deadline:
                return sorted(alive)
            time.sleep(0.1)

    def _await_recovery(self, outage: Outage) -> None:
        deadline = outage.back_at + self._bound
        pending = set(outage.survivors)
        outage.workers_back = dict.fromkeys(outage.survivors)
        while time.monotonic() < deadline:
            for pid in list(pending):
                charged = self._last_charge.get(pid, 0.0)
                if charged > outage.back_at:
                    outage.workers_back[pid] = round(charged - outage.back_at, 1)
                    pending.discard(pid)
            if self._producer is not None and outage.http_back is None:
                later = [t for t in self._producer.accepted_at if t > outage.back_at]
                if later:
                    outage.http_back = round(later[0] - outage.back_at, 1)
            http_done = self._producer is None or outage.http_back is not None
            if not pending and http_done:
                return
            time.sleep(0.2)

    def wait(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


def outage_problems(outages: list[Outage], http: bool) -> list[str]:
    """Each restart that failed, each survivor that did not work again, and an HTTP
    server that accepted nothing after a restart."""
    problems = []
    for o in outages:
        if o.error:
            problems.append(f"restart -m {o.mode} failed: {o.error}")
            continue
        if not o.survivors:
            problems.append(f"restart -m {o.mode}: no worker was alive to come back")
        stuck = [pid for pid, back in o.workers_back.items() if back is None]
        if stuck:
            problems.append(
                f"restart -m {o.mode}: worker(s) {stuck} applied no charge after the server "
                "was back (not recovered by themselves)"
            )
        if http and o.http_back is None:
            problems.append(f"restart -m {o.mode}: agentq serve accepted no enqueue afterwards")
    return problems
