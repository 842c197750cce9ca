"""The state a worker's stages share: one lock, the tasks in flight, the slot count.

:class:`WorkerState` is the base of every stage mixin (receiving, running,
leases, committing) and of :class:`~agentq.executor.worker.Worker`, which
composes them. The stages share one condition variable because they hand tasks
to each other and wait on the same counts (``_outstanding`` for leasing,
``_pending_commits`` and ``_inflight`` for stopping); splitting it would only
add ways to deadlock.
"""

from __future__ import annotations

import queue as queue_mod
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

from agentq.clock import Clock
from agentq.executor.inflight import Inflight, Outcome

if TYPE_CHECKING:
    import asyncio

    from agentq.executor.admission import Admission
    from agentq.runtime import Runtime

__all__ = ["WorkerState"]


class WorkerState:
    """Attributes and slot accounting shared by the stages of a worker."""

    runtime: Runtime
    clock: Clock
    queues: list[str]
    concurrency: int
    batch_size: int
    group_commit: int
    receive_timeout: float
    # Long-lived receive streams open now (cancelled on stop).
    _open_streams: set[Any]
    # Receives waiting for a message now (cancelled on stop, so it is prompt).
    _waiting_receives: set[Any]
    renew_margin: float
    monitor_interval: float
    capacity: int
    max_abandoned: int
    # Handler threads given up on a timeout that have not returned yet.
    abandoned: int
    # Per task id, its calls hung in such threads: the task is not called again
    # meanwhile (agentq.executor.running).
    _hung: Counter[str]
    stats: Counter[str]
    # Attempts finished and committed (one log line each): --max-tasks counts these.
    finished: int
    admission: Admission
    _stats_lock: threading.Lock
    _lock: threading.Condition
    # Tasks leased by this worker and not yet finished (running or waiting for a
    # handler thread). Receivers lease only while it is below the capacity; they
    # never hold a reservation while waiting, so an idle queue cannot starve a
    # busy one.
    _outstanding: int
    _pending_commits: int
    # Commits finished since the worker was made: drain() runs another round when
    # one finished during a round (it may have sent a task that round had passed).
    _commits_finished: int
    _inflight: dict[str, Inflight]
    # SimpleQueue: a C queue without futures or task accounting; handing a task
    # to a handler thread and its outcome to the committer is on the hot path.
    _outcomes: queue_mod.SimpleQueue[Outcome | None]
    _work: queue_mod.SimpleQueue[Inflight | None]
    _stop: threading.Event
    _handlers_started: int
    # The error that stopped the worker (a database that refuses writes).
    failure: BaseException | None
    _loop: asyncio.AbstractEventLoop | None
    _loop_thread: threading.Thread | None

    def _count(self, label: str, n: int = 1) -> None:
        if not n:
            return
        with self._stats_lock:
            self.stats[label] += n

    def _room(self, block: bool, stop: threading.Event | None = None) -> int:
        """How many tasks a receiver may lease now (waiting for room if ``block``)."""
        with self._lock:
            while self._outstanding >= self.capacity:
                if not block or (stop is not None and stop.is_set()):
                    return 0
                self._lock.wait(0.1)
            return min(self.batch_size, self.capacity - self._outstanding)

    def _done(self, n: int) -> None:
        """``n`` leased tasks will not run here (or have finished): free their slots."""
        if n:
            with self._lock:
                self._outstanding -= n
                self._lock.notify_all()

    def _finished_commit(self, n: int) -> None:
        with self._lock:
            self._pending_commits -= n
            self._commits_finished += 1
            self._lock.notify_all()

    def _fail(self, exc: BaseException) -> None:
        """Stop serving because of ``exc``; :meth:`Worker.run` raises the first one."""
        with self._lock:
            if self.failure is None:
                self.failure = exc
            self._lock.notify_all()

    def _lease_size(self, queue: str, n: int) -> int:
        """How many messages to lease from ``queue`` when ``n`` fit (batch tools
        lease more: :mod:`agentq.executor.batching`)."""
        return n

    def _batched(self, runnable: list[Inflight]) -> list[Inflight]:
        """The work items of claimed tasks (a batch travels as one)."""
        return runnable

    def _give_up(self, inflight: Inflight) -> None:
        """Time out a running handler (see :class:`~agentq.executor.timeouts.Timeouts`)."""
        raise NotImplementedError
