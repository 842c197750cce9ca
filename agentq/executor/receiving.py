"""Receiving: leasing batches of ready tasks and handing them on.

In :meth:`~agentq.executor.worker.Worker.run` one receiver thread per queue
streams batches, only as many tasks as there are free slots, so an idle queue
never holds a reservation a busy one needs. :meth:`~agentq.executor.worker.Worker.drain`
instead runs rounds over every queue with no waiting. Either way a batch goes
through admission (:class:`~agentq.executor.admission.Admission`) and what may
run goes to the handler threads.

On a backend with long-lived receives (``receive_duration``: Spanner, whose
documents advise one RECEIVE of about 20 minutes per worker per queue, in a
loop) the receiver keeps one stream open instead, but only while the worker has
a free slot: a stream's server leases batch after batch for as long as it is
open and messages are ready, whether or not anybody reads them, and what it
sent while the worker was full would wait in the client's buffer with its 10 s
leases running (an unread stream leased 76 messages within a second). So:

* a stream is opened when a slot is free, asking for batches of at most the
  free slots (``max_batch_size``, the documents' one bound on a RECEIVE);
* the batch that fills the worker ends its stream before it is claimed, and a
  receiver whose worker another queue's receiver filled has its stream ended
  too (both counted as ``receive_ended_full``); a new stream opens when a slot
  frees. What a server sends between the filling batch and the cancel is all
  that can strand (a batch or two; redelivered after its lease and backoff);
* a stream that ends by itself is re-issued at once, and with backoff after an
  error.

A message whose lease had already expired when it arrived is skipped
(``expired_on_receipt``), as the documents' Go sample does. A lease counts from
when it was granted, estimated pessimistically
(:mod:`agentq.executor.lease_clock`), not from when the row was read: one with
``renew_margin`` or less left is renewed before it is claimed, or released
unstarted if that fails (``released_short_lease``); both kinds are counted as
``stranded_prefetch``. On stop, open streams are cancelled so the worker does
not wait for the end of a 20-minute RECEIVE.

A database that refuses writes (:class:`~agentq.errors.DatabaseNotWritable`:
read-only, full, no permission) stops the worker: ``run()`` and ``drain()``
raise it instead of retrying a lease that cannot succeed. Any other receive
error is retried with backoff, so a briefly unavailable database never
silently ends a queue's receiver.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, cast

from agentq.backends import Message
from agentq.backends.tags import tagged
from agentq.errors import DatabaseNotWritable
from agentq.executor.lease_clock import StreamLeaseClock
from agentq.executor.state import WorkerState

__all__ = ["Receiving"]

log = logging.getLogger("agentq.worker")


class Receiving(WorkerState):
    """The receive stage of a worker."""

    def _receive(
        self, queue: str, n: int, duration: float, stop: threading.Event | None = None
    ) -> list[Message]:
        """The first batch of a receive (at most ``n`` tasks); for a one-shot
        receive (``duration`` 0, drain()) on a backend with long-lived receives
        every batch of it: on Spanner one RECEIVE call can carry several batches,
        and the rows of batches never read would stay leased, unseen, until their
        leases expire. Elsewhere a stream leases its next batch only when asked
        for it, and a one-shot stream leases until nothing is ready: reading it
        whole would lease and claim the entire queue past the worker's capacity
        (all of it shown running while a few run, and held until its leases
        expire if the worker dies). A receive that may wait ends early (empty)
        once ``stop`` is set: the stopping worker cancels it."""
        backend = self.runtime.backend
        long_lived = isinstance(getattr(backend, "receive_duration", None), int | float)
        stream: Iterator[list[Message]]
        if backend.swaps_in_sets and getattr(backend, "claims_with_leases", False):
            # Marked running with the lease (agentq.executor.lease_claims).
            claim = self.admission.lease_claims.for_queue(queue)
            stream = cast(Any, backend).stream(
                queue, max_batch_size=n, max_duration=duration, claim=claim
            )
        else:
            stream = backend.stream(queue, max_batch_size=n, max_duration=duration)
        waits = duration > 0 and stop is not None and hasattr(stream, "cancel")
        if waits:
            with self._lock:
                self._waiting_receives.add(stream)
            if stop is not None and stop.is_set():  # stopped before it was tracked
                cast(Any, stream).cancel()
        try:
            if duration == 0 and long_lived:
                return [m for batch in stream for m in batch]
            for batch in stream:
                return batch
            return []
        finally:
            if waits:
                with self._lock:
                    self._waiting_receives.discard(stream)
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _receive_loop(self, queue: str, stop: threading.Event) -> None:
        duration = getattr(self.runtime.backend, "receive_duration", None)
        if isinstance(duration, int | float) and duration > 0:
            self._long_receive_loop(queue, stop, float(duration))
            return
        failures = 0
        while not stop.is_set():
            n = self._room(block=True, stop=stop)
            if not n:
                continue
            try:
                size = self._lease_size(queue, n)
                batch = self._receive(queue, size, self.receive_timeout, stop)
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
                    self._dispatch(batch, received=self.clock.monotonic())
                except DatabaseNotWritable as exc:
                    log.error("claiming from %s failed: %s; the worker stops", queue, exc)
                    self._fail(exc)
                    stop.set()
                    return

    def _long_receive_loop(self, queue: str, stop: threading.Event, duration: float) -> None:
        """One long-lived stream at a time, open only while the worker has room
        (see the module docstring)."""
        failures = 0
        while not stop.is_set():
            room = self._free_slots(stop)
            if not room:
                continue
            stream: Any = None
            try:
                # A batch never brings more than the free slots it was asked for.
                stream = self.runtime.backend.stream(
                    queue,
                    max_batch_size=self._lease_size(queue, min(self.batch_size, room)),
                    max_duration=duration,
                )
                self._track_stream(stream)
                batches = iter(stream)
                lease_clock = StreamLeaseClock(self.clock, self.runtime.backend.lease_seconds)
                while True:
                    try:
                        batch, since = lease_clock.read(batches)
                    except StopIteration:
                        break
                    failures = 0
                    full = self._fills(len(batch))
                    if full:
                        # End the call before the claim: every moment it stays open
                        # the server may lease more that nobody reads.
                        self._end_stream(stream)
                    self._dispatch_fresh(batch, since)
                    if full or stop.is_set():
                        break
            except DatabaseNotWritable as exc:
                self._count("receive_errors")
                log.error("receive from %s failed: %s; the worker stops", queue, exc)
                self._fail(exc)
                stop.set()
                return
            except Exception as exc:
                failures += 1
                self._count("receive_errors")
                log.warning("receive from %s failed (%r); retrying", queue, exc)
                self.clock.wait(stop, min(0.1 * 2**failures, 5.0))
            finally:
                if stream is not None:
                    self._untrack_stream(stream)
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()

    def _free_slots(self, stop: threading.Event) -> int:
        """Wait until a slot is free; how many are (0 on stop)."""
        with self._lock:
            while self._outstanding >= self.capacity:
                if stop.is_set():
                    return 0
                self._lock.wait(0.1)
            return 0 if stop.is_set() else self.capacity - self._outstanding

    def _fills(self, n: int) -> bool:
        """Whether ``n`` more tasks leave the worker without a free slot."""
        with self._lock:
            return self._outstanding + n >= self.capacity

    def _end_stream(self, stream: Any) -> None:
        """Cancel a long-lived stream because the worker is full (counted once)."""
        with self._lock:
            if stream not in self._open_streams:
                return  # ended already
            self._open_streams.discard(stream)
        self._count("receive_ended_full")
        cancel = getattr(stream, "cancel", None)
        if cancel is not None:
            cancel()

    def _end_streams_when_full(self) -> None:
        """The worker just became full: end every open long-lived stream, so none
        leases on while no receiver would read it (they reopen when a slot frees)."""
        with self._lock:
            if self._outstanding < self.capacity:
                return
            streams = list(self._open_streams)
        for stream in streams:
            self._end_stream(stream)

    def _dispatch_fresh(self, batch: list[Message], since: float | None = None) -> None:
        """Dispatch a streamed batch, its leases counted from ``since`` (the stream's
        estimate of their grant, see :mod:`agentq.executor.lease_clock`) or the
        server's expiry, whichever is earlier. A message whose lease is gone is
        skipped (``expired_on_receipt``); one with ``renew_margin`` or less left is
        renewed before it is claimed, and released unstarted if that fails
        (``released_short_lease``). Both count as ``stranded_prefetch``: leased by
        the stream ahead of a free handler, and not run."""
        mono = self.clock.monotonic()
        lease = self.runtime.backend.lease_seconds
        lease_clock = StreamLeaseClock(self.clock, lease)
        since = mono if since is None else since
        granted = {m.lease_token: lease_clock.granted_at(m, since) for m in batch}
        fresh = [m for m in batch if lease - (mono - granted[m.lease_token]) > 0]
        self._count("expired_on_receipt", len(batch) - len(fresh))
        short = [m for m in fresh if lease - (mono - granted[m.lease_token]) <= self.renew_margin]
        if short:
            renewed = self._renew_on_receipt(short, granted)
            dropped = {m.lease_token for m in short} - renewed.keys()
            fresh = [renewed.get(m.lease_token, m) for m in fresh if m.lease_token not in dropped]
        self._count("stranded_prefetch", len(batch) - len(fresh))
        if fresh:
            self._dispatch(fresh, received=granted)

    def _renew_on_receipt(
        self, short: list[Message], granted: dict[str, float]
    ) -> dict[str, Message]:
        """Renew ``short`` leases at once: the renewed messages by their old token
        (``granted`` gets their new tokens' grant times); the rest are released."""
        sent_at = self.clock.monotonic()
        try:
            rows = self.runtime.backend.renew(short[0].queue, [m.lease_token for m in short])
        except Exception as exc:
            # Outcome unknown, and too little lease left to find out on a later
            # tick: not started, so a redelivery cannot run it twice.
            self._count("renew_errors")
            log.warning("renewing %d short lease(s) on receipt failed (%r)", len(short), exc)
            rows = []
        by_old = {r.old_token: r for r in rows if r.new_token is not None}
        out: dict[str, Message] = {}
        for m in short:
            row = by_old.get(m.lease_token)
            if row is None or row.new_token is None:
                self._count("released_short_lease")
                continue
            out[m.lease_token] = replace(
                m, lease_token=row.new_token, lease_expiry=row.lease_expiry
            )
            granted[row.new_token] = sent_at  # the server extended it after this moment
            self._count("renewed_on_receipt")
        return out

    def _track_stream(self, stream: Any) -> None:
        with self._lock:
            self._open_streams.add(stream)

    def _untrack_stream(self, stream: Any) -> None:
        with self._lock:
            self._open_streams.discard(stream)

    def _cancel_streams(self) -> None:
        """Cancel every open long-lived stream and every waiting receive (from
        the stopping thread)."""
        with self._lock:
            streams = [*self._open_streams, *self._waiting_receives]
        for stream in streams:
            cancel = getattr(stream, "cancel", None)
            if cancel is not None:
                cancel()

    def _drain_rounds(self, max_rounds: int | None) -> int:
        """Receive from every queue until nothing is ready, in flight or uncommitted
        (or ``max_rounds`` rounds ran); returns the number of tasks received.

        On a backend with long-lived receives (Spanner) a one-shot receive is a
        RECEIVE the client cancels, and a message that became ready just as the
        cancel left would be leased and never read (see
        :mod:`agentq.backends.spanner.call_watch`): there, a round receives from
        every queue before it runs anything, and the next one starts once
        everything it ran has committed, so no commit of this worker's lands
        while a RECEIVE is open."""
        apart = isinstance(getattr(self.runtime.backend, "receive_duration", None), int | float)
        handled = 0
        rounds = 0
        while max_rounds is None or rounds < max_rounds:
            rounds += 1
            got = 0
            if apart:
                self._wait_settled()
            with self._lock:
                commits_before = self._commits_finished
            received: list[list[Message]] = []
            for name in self.queues:
                n = self._room(block=False) - got if apart else self._room(block=False)
                if n <= 0:
                    break
                batch = self._receive(name, self._lease_size(name, n), 0.0)
                got += len(batch)
                if batch and apart:
                    received.append(batch)
                elif batch:
                    self._dispatch(batch)
            for batch in received:
                self._dispatch(batch)
            handled += got
            if got:
                continue
            with self._lock:
                # A commit that finished during the round may have sent a task to
                # a queue this round had already received from: look once more.
                settled = self._commits_finished == commits_before
                if settled and not self._inflight and not self._pending_commits:
                    return handled
                if settled:
                    self._lock.wait(0.05)
        return handled

    def _wait_settled(self) -> None:
        """Wait until nothing runs or waits to commit."""
        with self._lock:
            while self._inflight or self._pending_commits:
                self._lock.wait(0.05)

    def _dispatch(
        self, batch: list[Message], received: float | dict[str, float] | None = None
    ) -> None:
        """Claim ``batch`` and queue what may run; ``received`` is when the leases
        were granted (by lease token, or one time for all) on the monotonic clock."""
        with self._lock:
            self._outstanding += len(batch)
        self._end_streams_when_full()
        try:
            with tagged("claim", queue=batch[0].queue if batch else None):
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
                inflight.leased_at = (
                    received.get(inflight.token) if isinstance(received, dict) else received
                )
                self._inflight[inflight.task_id] = inflight
        for inflight in self._batched(runnable):
            self._work.put(inflight)
