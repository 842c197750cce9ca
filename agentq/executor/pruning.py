"""A serving worker's pruner: finished tasks are deleted once past their retention.

With retention off for every tool, it still deletes the console chart's old
tallies (:func:`~agentq.lifecycle.retention.prune_tallies`) once a minute.

While :meth:`Worker.run` serves, a thread runs :meth:`Runtime.prune` every
``interval`` seconds (default: a quarter of the shortest retention, at most a
minute): a batch of records per short transaction, with a pause between batches
so that the worker's own commits (and other processes') keep their turns. Most
passes read only the tasks that became old since the previous one (a window
pass); a full pass, which also finds tasks that finished long after they were
created, runs every :func:`full_pass_every` (the shortest retention, at most a
day). Free space is given back beyond a quarter of the file (:data:`KEEP_FREE`):
a steady stream reuses it. The workers of one database take turns through a
claim record (:func:`~agentq.lifecycle.retention.claim_pruning`), so usually
one prunes; two at once are safe. A failing prune is logged and tried again
next time.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from agentq.lifecycle.retention import DEFAULT_BATCH, claim_pruning, prune_tallies

if TYPE_CHECKING:
    from agentq.executor.worker import Worker

__all__ = ["KEEP_FREE", "Pruner", "default_interval", "full_pass_every"]

log = logging.getLogger("agentq.worker")

#: Longest wait between two passes.
MAX_INTERVAL = 60.0
#: Shortest wait between two passes.
MIN_INTERVAL = 1.0
#: Seconds between two batches of a pass: other writers' turn.
DEFAULT_PAUSE = 0.02
#: Free space (times the database's size) kept for reuse rather than given back.
KEEP_FREE = 0.25


def default_interval(shortest: timedelta | None) -> float:
    """Seconds between passes for the shortest retention of any tool."""
    if shortest is None:
        return MAX_INTERVAL
    return min(MAX_INTERVAL, max(MIN_INTERVAL, shortest.total_seconds() / 4))


def full_pass_every(shortest: timedelta) -> timedelta:
    """How often a full pass runs between window passes."""
    return min(shortest, timedelta(days=1))


class Pruner:
    """Prunes the worker's database every ``interval`` seconds until :meth:`stop`."""

    def __init__(
        self,
        worker: Worker,
        interval: float | None = None,
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = DEFAULT_PAUSE,
    ) -> None:
        self.worker = worker
        shortest = worker.runtime.retention_rules().shortest
        self.interval = default_interval(shortest) if interval is None else interval
        self.batch_size = batch_size
        self.pause = pause
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_pass: datetime | None = None  # the previous pass's "now"
        self._last_full: datetime | None = None

    def prune_once(self) -> None:
        """One pass, if this worker holds (or gets) the database's pruning claim."""
        rt = self.worker.runtime
        ttl = timedelta(seconds=3 * self.interval + 60)
        if not claim_pruning(rt.backend, self.owner, rt.clock.now(), ttl):
            return
        shortest = rt.retention_rules().shortest
        now = rt.clock.now()
        if shortest is None:  # tasks kept forever; the chart's tallies are not
            prune_tallies(rt.backend, now)
            return
        full = self._last_full is None or now - self._last_full >= full_pass_every(shortest)
        report = rt.prune(
            batch_size=self.batch_size, pause=self.pause, stop=self._stop, keep_free=KEEP_FREE,
            since=None if full else self._last_pass,
        )  # fmt: skip
        if report.complete:
            # An interrupted pass is made again from where the last one started.
            self._last_pass = report.now
            if full:
                self._last_full = report.now
        counts = report.counts
        self.worker._count("pruned_tasks", counts.tasks)
        if counts.total:
            kinds = ", ".join(f"{n} {kind}" for kind, n in counts.as_dict().items() if n)
            log.info("pruned %s; %d bytes given back", kinds, report.reclaimed_bytes)

    def _loop(self) -> None:
        clock = self.worker.clock
        while True:
            try:
                self.prune_once()
            except Exception as exc:  # the database failing: the worker reports that itself
                log.warning("prune failed (tried again in %gs): %s", self.interval, exc)
            if clock.wait(self._stop, self.interval):
                return

    def start(self) -> Pruner:
        """Start pruning in a background thread."""
        self._thread = threading.Thread(target=self._loop, name="agentq-pruner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current batch."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
