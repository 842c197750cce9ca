"""Giving up calls that overrun their tool's timeout.

A call that runs longer than its tool's timeout (``@tool(timeout=...)`` or the
policy's ``timeout``) is given up by the lease monitor: a ``TimeoutError``
failure is recorded at once: the delivery is acked and the retry scheduled with
backoff (or the task dead-lettered when out of attempts), so the late
completion of the hung call finds its message gone and records nothing. The
slot it held is freed, so a hung call never costs the worker its capacity:

* an **async** handler's task is cancelled on the event loop (it sees
  ``CancelledError`` at its next ``await``); its handler thread returns at once;
* a **sync** handler cannot be interrupted in Python: its thread is
  *abandoned* and a fresh handler thread takes its slot. When the abandoned
  call finally returns, its result is dropped (the completion's ack would fail
  anyway) and its thread exits. At most ``max_abandoned`` threads (default:
  ``concurrency``) are abandoned at a time; beyond that a timed-out handler
  keeps its slot until its call returns, and an error is logged: a worker with
  that many hung calls should be restarted. ``stats`` counts ``timed_out``,
  ``cancelled``, ``abandoned_threads`` and ``abandoned_limit``;
  ``Worker.abandoned`` is the number abandoned now.

A call that hangs on every attempt must not spend that bound: a task whose
earlier call still hangs in an abandoned thread of this worker is not called
again (a retry would only hang beside it). Its attempt fails at once with a
``TimeoutError`` that says so, without taking a handler for longer than that,
and once its attempts run out the task is dead-lettered, so it never holds a
slot (``stats``: ``still_hung``). Each task thus costs at most one abandoned
thread, and the quick tasks behind it keep running.

Giving up a call does not undo it: the external system may still receive and
complete the request after the timeout. The retry is sent with the same task
id as ``Idempotency-Key``, so a system that honours the key applies the effect
once and answers the retry with the first result.
"""

from __future__ import annotations

import logging

from agentq.executor.inflight import Inflight, Outcome
from agentq.executor.state import WorkerState

__all__ = ["Timeouts"]

log = logging.getLogger("agentq.worker")


class Timeouts(WorkerState):
    """The timeout stage of a worker: what the lease monitor does with a handler
    past its deadline, and what a task whose call still hangs gets instead of a
    call (the handler-thread stage, :class:`~agentq.executor.running.Running`,
    builds on it)."""

    def _give_up(self, inf: Inflight) -> None:
        """The lease monitor found ``inf`` past its deadline: record a timeout
        failure now (its retry is scheduled), so a late completion fails, and
        free its handler's slot: an async run is cancelled; a sync handler's
        thread is abandoned and a fresh thread takes its place, unless
        ``max_abandoned`` threads are abandoned already."""
        with self._lock:
            if self._inflight.get(inf.task_id) is not inf:
                return  # it finished (and reported) meanwhile
            del self._inflight[inf.task_id]
            inf.timed_out = True
            future = inf.future
            replace = future is None and self.abandoned < self.max_abandoned
            if replace:
                inf.replaced = True
                self.abandoned += 1
                self._outstanding -= 1
                self._hung[inf.task_id] += 1
            self._pending_commits += 1
            self._lock.notify_all()
        limit = inf.timeout if inf.timeout is not None else 0.0
        tool = inf.record["tool"]
        self._count("timed_out")
        self._outcomes.put(
            Outcome(
                "failure",
                inf,
                exc=TimeoutError(f"tool {tool!r} ran longer than its timeout ({limit:.1f}s)"),
            )
        )
        if future is not None:
            # Cancels the task on the loop; the handler thread waiting for it
            # returns at once, so nothing is abandoned.
            future.cancel()
            self._count("cancelled")
            log.warning("%s (%s) timed out after %.1fs; cancelled", inf.task_id, tool, limit)
        elif replace:
            self._count("abandoned_threads")
            self._spawn_handler()
            log.warning(
                "%s (%s) timed out after %.1fs; its handler thread is abandoned (%d of at "
                "most %d) and replaced", inf.task_id, tool, limit, self.abandoned,
                self.max_abandoned,
            )  # fmt: skip
        else:
            self._count("abandoned_limit")
            log.error(
                "%s (%s) timed out after %.1fs; %d handler threads are abandoned already "
                "(max_abandoned), so this one keeps its slot until its call returns: "
                "restart the worker if calls keep hanging",
                inf.task_id, tool, limit, self.abandoned,
            )  # fmt: skip

    def _returned(self, task_id: str) -> None:
        """An abandoned call of ``task_id`` returned at last (the lock held)."""
        self._hung[task_id] -= 1
        if self._hung[task_id] <= 0:
            del self._hung[task_id]

    def _still_hung(self, inflight: Inflight) -> Outcome | None:
        """The failed attempt of a task whose earlier call still hangs in an
        abandoned thread (not called again: see the module docstring), else None."""
        if not self._hung:
            # None hangs (the common case), read without the lock: a hang is
            # counted (by the monitor's _give_up) before the failure that retries
            # the task is even queued for commit, so no later delivery misses it.
            return None
        with self._lock:
            hung = self._hung.get(inflight.task_id, 0)
        if not hung:
            return None
        self._count("still_hung")
        rec = inflight.record
        return Outcome("failure", inflight, exc=TimeoutError(
            f"tool {rec['tool']!r} timed out on an earlier attempt and that call still has "
            f"not returned: attempt {rec['attempt']} is not called beside it"
        ))  # fmt: skip

    def _spawn_handler(self) -> None:
        """Start a fresh handler thread (the handler-thread stage's)."""
        raise NotImplementedError
