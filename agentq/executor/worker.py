"""The Worker: one executor over a runtime's queues, composed of its stages.

=================  =====================================================
stage              where
=================  =====================================================
receive, drain     :mod:`agentq.executor.receiving`
claim checks       :mod:`agentq.executor.admission`
handler threads    :mod:`agentq.executor.running`
timeouts           :mod:`agentq.executor.timeouts`
batch handlers     :mod:`agentq.executor.batching`
lease renewal      :mod:`agentq.executor.leases`
group commit       :mod:`agentq.executor.committing`
ledger writes      :mod:`agentq.executor.outcomes`
=================  =====================================================
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from agentq.decision import as_timedelta
from agentq.errors import ConfigError
from agentq.executor.admission import DEFAULT_UNKNOWN_TOOL_GRACE, Admission
from agentq.executor.batching import Batching
from agentq.executor.committing import Committing
from agentq.executor.heartbeat import DEFAULT_TIMEOUT, Heartbeat, check_heartbeat_settings
from agentq.executor.holds import Holds
from agentq.executor.leases import LeaseMonitor, renewal_schedule
from agentq.executor.pruning import Pruner
from agentq.executor.receiving import Receiving
from agentq.executor.running import Running
from agentq.lifecycle.tasks import ESCALATION_QUEUE
from agentq.ratelimit import RateLimiter

if TYPE_CHECKING:
    from agentq.runtime import Runtime

log = logging.getLogger("agentq.worker")

__all__ = ["Worker", "WorkerStats"]

_STOP_CHECK_SECONDS = 0.25
log = logging.getLogger("agentq.worker")


class WorkerStats(Counter[str]):
    """Counts of what a worker did.

    Outcomes: ``succeeded``, ``retried``, ``throttled``, ``checkpointed``, ``dead``,
    ``policy_refused``, ``held_back``, ``unknown_tool`` (left for a worker that
    knows the tool), ``key_limited`` (deferred until its key has a free slot).
    Messages: ``stale_message`` (acked, task unchanged), ``stray``
    (dead-lettered as a stray entry), ``stale_completion`` (a run whose ack
    failed: nothing recorded). Leases: ``renewed``,
    ``lease_lost``. Timeouts: ``timed_out``, ``cancelled`` (async),
    ``abandoned_threads``, ``abandoned_limit``, ``late_after_timeout``,
    ``still_hung`` (an attempt not called: the task's earlier call still hangs). Also
    ``group_commits`` (of which ``fenced_commits``: plain successes written at
    READ COMMITTED on PostgreSQL), ``commit_failed``, ``crashed`` and ``receive_errors``.
    Long-lived receives (Spanner): ``receive_ended_full`` (a stream ended because
    the worker became full, so it leases nothing nobody reads), ``expired_on_receipt``
    (messages skipped, their lease gone on arrival); ``renewed_on_receipt`` (a
    lease with the renewal margin or less left, renewed before the claim),
    ``released_short_lease`` (such a lease that could not be renewed: released
    unstarted), ``stranded_prefetch`` (rows the stream leased ahead of the
    handlers and the worker did not run: both kinds above); ``renew_errors``.
    Heartbeats: ``heartbeat_timeouts`` (other workers reported lost),
    ``heartbeat_check_errors`` (a check for them that failed, logged at WARNING).
    """


class Worker(Batching, Receiving, Running, LeaseMonitor, Committing):
    """Executes tasks from a runtime's queues.

    ``concurrency`` handler threads run tasks; ``batch_size`` caps one lease;
    ``group_commit`` caps how many completions share one transaction;
    ``max_deliveries`` dead-letters an attempt whose deliveries never complete
    (a poison task that kills its worker); ``prefetch`` is how many leased tasks
    may wait for a free handler (their leases are renewed meanwhile; default:
    ``concurrency`` or ``batch_size``, whichever is larger, so a worker whose
    handlers are all busy can still lease one whole batch); ``max_abandoned``
    bounds the handler threads a worker gives up on when their
    calls overrun the tool's timeout (default: ``concurrency``; see
    :mod:`agentq.executor.timeouts` for what a timeout does);
    ``unknown_tool_grace`` (seconds or a timedelta, default 24 h) is how long a
    task for a tool this worker does not know is left for a worker that knows it
    (a rolling deploy) before it is dead-lettered. While
    :meth:`run` serves, the worker publishes a heartbeat every
    ``heartbeat_interval`` seconds under ``worker_id`` (default
    ``host:pid:random``), is reported lost by the other workers after
    ``heartbeat_timeout`` seconds without one, and logs its counters every
    ``stats_interval`` (``None``: never); see :mod:`agentq.executor.heartbeat`.
    It also deletes finished tasks past their retention (``prune=False``: not
    this worker), every ``prune_interval`` seconds; see :mod:`agentq.executor.pruning`.
    Every ``monitor_interval`` seconds it renews the leases with ``renew_margin``
    seconds or less left (defaults: 0.5 s and 2.5 s for 10 s leases, less for a
    backend's shorter ``lease_seconds``; see :func:`~agentq.executor.leases.renewal_schedule`).
    A queue in ``queues`` that none of the runtime's tools uses is an error.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 8,
        batch_size: int | None = None,
        group_commit: int = 64,
        receive_timeout: float = 1.0,
        max_deliveries: int = 5,
        renew_margin: float | None = None,
        monitor_interval: float | None = None,
        prefetch: int | None = None,
        max_abandoned: int | None = None,
        unknown_tool_grace: float | timedelta = DEFAULT_UNKNOWN_TOOL_GRACE,
        heartbeat_interval: float = 5.0,
        stats_interval: float | None = 60.0,
        heartbeat_timeout: float | None = None,
        worker_id: str | None = None,
        prune: bool = True,
        prune_interval: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        grace = as_timedelta(unknown_tool_grace)
        if grace < timedelta(0):
            raise ValueError(f"unknown_tool_grace must be zero or more, got {unknown_tool_grace}")
        if max_abandoned is not None and max_abandoned < 0:
            raise ValueError("max_abandoned must be zero or more")
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must be zero or more")
        self.runtime = runtime
        self.clock = runtime.clock
        known = runtime.tools.queues() | {ESCALATION_QUEUE}
        unknown = sorted(set(queues or ()) - known)
        if unknown:
            # A mistyped --queue would otherwise be served, empty, forever.
            raise ConfigError(
                f"unknown queue(s) {', '.join(map(repr, unknown))}: this project's tools "
                f"use {', '.join(sorted(known))}"
            )
        self.queues = list(queues or sorted(known))
        # Here, not in run(): a worker started in a thread would only report it at stop().
        check_heartbeat_settings(
            heartbeat_interval,
            heartbeat_timeout or max(DEFAULT_TIMEOUT, 3 * heartbeat_interval),
        )
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.worker_id = worker_id
        self.heartbeat: Heartbeat | None = None  # while run() serves
        self.prune = prune
        self.prune_interval = prune_interval
        self.stats_interval = stats_interval
        self.finished = 0  # attempts finished and committed (one log line each)
        self.concurrency = concurrency
        self.batch_size = batch_size or concurrency
        self.group_commit = group_commit
        self.receive_timeout = receive_timeout
        self._open_streams = set()
        self._waiting_receives = set()
        self.max_deliveries = max_deliveries
        margin, tick = renewal_schedule(runtime.backend.lease_seconds)
        self.renew_margin = margin if renew_margin is None else renew_margin
        self.monitor_interval = tick if monitor_interval is None else monitor_interval
        self.stats = WorkerStats()
        self._stats_lock = threading.Lock()
        self.holds = Holds(self.clock, runtime.policy)
        self.admission = Admission(
            runtime, self.holds, self._count, max_deliveries=max_deliveries,
            unknown_tool_grace=grace,
        )  # fmt: skip
        self._inflight = {}
        self._lock = threading.Condition()
        self._outstanding = 0
        # Room for one whole batch beyond the busy handlers: with less, a batch_size
        # above concurrency could never be leased at once, and the worker would
        # lease (and claim, and commit) in more, smaller transactions than asked.
        # Measured with 16 handlers and batches of 50, two workers: about 6-14 %
        # more tasks/s than room for 16.
        default_prefetch = max(concurrency, self.batch_size)
        self.capacity = concurrency + (default_prefetch if prefetch is None else prefetch)
        self._pending_commits = 0
        self._commits_finished = 0
        self.max_abandoned = concurrency if max_abandoned is None else max_abandoned
        self.abandoned = 0
        self._hung = Counter()
        self._outcomes = queue_mod.SimpleQueue()
        self._work = queue_mod.SimpleQueue()
        self._limiter = RateLimiter(runtime.backend, runtime.clock, runtime.policy)
        self._handlers_started = 0  # names handler threads, replacements included
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop = None
        self._loop_thread = None
        self._started = False
        self._recorded = False
        self.failure = None

    # -- services ------------------------------------------------------------------

    def _start_services(self) -> None:
        if self._started:
            return
        if not self._recorded:
            # Producers without the tools' code enqueue against these records.
            self.runtime.record_tools()
            self.runtime.sync_schedules()  # seeds each periodic schedule's first run
            self._recorded = True
        self._started = True
        self._stop.clear()
        self._start_handlers()
        for target, name in ((self._monitor_loop, "monitor"), (self._commit_loop, "committer")):
            t = threading.Thread(target=target, name=f"agentq-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _stop_services(self, timeout: float = 30.0) -> None:
        if not self._started:
            return
        with self._lock:
            waiting = [inf.task_id for inf in self._inflight.values()]
        if waiting:
            more = f" and {len(waiting) - 5} more" if len(waiting) > 5 else ""
            shown = ", ".join(waiting[:5]) + more
            log.info("stopping: waiting up to %gs for %d task(s) in flight to finish: %s",
                     timeout, len(waiting), shown)  # fmt: skip
        with self._lock:
            self._lock.wait_for(lambda: not self._inflight and not self._pending_commits, timeout)
        self._stop.set()
        self._outcomes.put(None)
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
        self._stop_handlers(timeout)
        self._started = False

    # -- public API ------------------------------------------------------------------

    def drain(self, max_rounds: int | None = None) -> int:
        """Run every task that is ready now (and any that become ready as a result
        without time passing), then return the number of tasks handled. Like
        :meth:`run`, it holds at most its capacity (handlers and prefetch) of
        leased tasks at a time; on Spanner, whatever one RECEIVE call brings."""
        self._start_services()
        try:
            return self._drain_rounds(max_rounds)
        finally:
            self._stop_services()

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        grace: float = 30.0,
        max_tasks: int | None = None,
    ) -> None:
        """Serve until ``stop`` is set (or :meth:`stop` is called), or until
        ``max_tasks`` attempts have finished: no new leases after that;
        in-flight tasks get ``grace`` seconds to finish and commit, the rest are
        left to redelivery once their leases expire.

        Raises :class:`~agentq.errors.DatabaseNotWritable` (after stopping as
        above) when the database refuses writes: retrying cannot help."""
        stop = stop or threading.Event()
        self.failure = None
        check = getattr(self.runtime.backend, "sizing_warnings", None)
        for warning in check(self.queues) if check else ():
            log.warning("sizing: %s", warning)  # a limit of the database this would exceed
        shapes = getattr(self.runtime.backend, "check_queue_shapes", None)
        if shapes is not None:  # Spanner: a queue of another shape fails every send
            shapes(self.queues)
        heartbeat = Heartbeat(  # checks its settings before anything starts
            self, self.heartbeat_interval, self.stats_interval, worker_id=self.worker_id,
            # Unset: 30 s, or three beats if they are further apart than 10 s.
            timeout=self.heartbeat_timeout or max(DEFAULT_TIMEOUT, 3 * self.heartbeat_interval),
        )  # fmt: skip
        self._start_services()
        self.heartbeat = heartbeat.start()
        pruner = Pruner(self, self.prune_interval).start() if self.prune else None
        receivers = [
            threading.Thread(target=self._receive_loop, args=(q, stop), name=f"agentq-recv-{q}")
            for q in self.queues
        ]
        for t in receivers:
            t.start()
        try:
            # A timed wait: a SIGTERM handler (stop.set) runs only once the main
            # thread wakes, and a signal the kernel hands to another thread does not
            # wake an untimed wait, so the worker would never notice it.
            while not stop.wait(_STOP_CHECK_SECONDS):
                if max_tasks is not None and self.finished >= max_tasks:
                    break
        finally:
            stop.set()
            self._cancel_streams()  # a long RECEIVE would otherwise hold its receiver
            for t in receivers:
                t.join(self.receive_timeout + 5)
            if pruner is not None:
                pruner.stop()
            self._stop_services(grace)
            heartbeat.stop()
        if self.failure is not None:
            raise self.failure

    def start(self) -> Worker:
        """Run :meth:`run` in a background thread."""
        self._runner_stop = threading.Event()
        self._runner = threading.Thread(target=self._run_quietly, daemon=True)
        self._runner.start()
        return self

    def _run_quietly(self) -> None:
        try:
            self.run(self._runner_stop)
        except Exception:
            pass  # kept in self.failure; stop() raises it

    def stop(self, timeout: float = 30.0) -> None:
        """Stop a worker started with :meth:`start` and wait for it; raises what
        stopped it early, if anything did (see :meth:`run`)."""
        self._runner_stop.set()
        self._runner.join(timeout)
        if self.failure is not None:
            raise self.failure
