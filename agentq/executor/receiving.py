"""Receiving: leasing batches of ready tasks and handing them on.

In :meth:`~agentq.executor.worker.Worker.run` one receiver thread per queue
streams batches, only as many tasks as there are free slots, so an idle queue
never holds a reservation a busy one needs. :meth:`~agentq.executor.worker.Worker.drain`
instead runs rounds over every queue with no waiting. Either way a batch goes
through admission (:class:`~agentq.executor.admission.Admission`) and what may
run goes to the handler threads.

A database that refuses writes (:class:`~agentq.errors.DatabaseNotWritable`:
read-only, full, no permission) stops the worker: ``run()`` and ``drain()``
raise it instead of retrying a lease that cannot succeed. Any other receive
error is retried with backoff, so a briefly unavailable database never
silently ends a queue's receiver.
"""

from __future__ import annotations

import logging
import threading

from agentq.backends import Message
from agentq.errors import DatabaseNotWritable
from agentq.executor.state import WorkerState

__all__ = ["Receiving"]

log = logging.getLogger("agentq.worker")


class Receiving(WorkerState):
    """The receive stage of a worker."""

    def _receive(self, queue: str, n: int, duration: float) -> list[Message]:
        stream = self.runtime.backend.stream(queue, max_batch_size=n, max_duration=duration)
        try:
            for batch in stream:
                return batch
            return []
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _receive_loop(self, queue: str, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            n = self._room(block=True, stop=stop)
            if not n:
                continue
            try:
                batch = self._receive(queue, n, self.receive_timeout)
                failures = 0
            except DatabaseNotWritable as exc:
                # Read-only, full or without permission: no retry can help until an
                # operator acts, so the whole worker stops and run() raises it.
                self._count("receive_errors")
                log.error("receive from %s failed: %s; the worker stops", queue, exc)
                self._fail(exc)
                stop.set()
                return
            except Exception as exc:
                # A receiver must outlive any failure (database briefly unavailable, a
                # driver error): a dead receiver would silently stop serving its queue.
                failures += 1
                self._count("receive_errors")
                log.warning("receive from %s failed (%r); retrying", queue, exc)
                self.clock.wait(stop, min(0.1 * 2**failures, 5.0))
                continue
            if batch:
                try:
                    self._dispatch(batch)
                except DatabaseNotWritable as exc:
                    log.error("claiming from %s failed: %s; the worker stops", queue, exc)
                    self._fail(exc)
                    stop.set()
                    return

    def _drain_rounds(self, max_rounds: int | None) -> int:
        """Receive from every queue until nothing is ready, in flight or uncommitted
        (or ``max_rounds`` rounds ran); returns the number of tasks received."""
        handled = 0
        rounds = 0
        while max_rounds is None or rounds < max_rounds:
            rounds += 1
            got = 0
            for name in self.queues:
                n = self._room(block=False)
                if not n:
                    break
                batch = self._receive(name, n, 0.0)
                got += len(batch)
                if batch:
                    self._dispatch(batch)
            handled += got
            if got:
                continue
            with self._lock:
                if not self._inflight and not self._pending_commits:
                    return handled
                self._lock.wait(0.05)
        return handled

    def _dispatch(self, batch: list[Message]) -> None:
        with self._lock:
            self._outstanding += len(batch)
        try:
            runnable = self.admission.claim(batch)
        except DatabaseNotWritable:
            self._done(len(batch))
            raise
        except Exception:
            self._done(len(batch))
            log.exception("claiming a batch failed; its leases will expire and be redelivered")
            return
        self._done(len(batch) - len(runnable))
        with self._lock:
            for inflight in runnable:
                self._inflight[inflight.task_id] = inflight
        for inflight in runnable:
            self._work.put(inflight)
