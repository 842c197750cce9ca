"""``stream``: long-lived ``RECEIVE_<queue>`` calls, as the queue documents advise.

Design (Google's "Using Spanner queues", "receive messages"): one streaming RECEIVE per
worker per queue, about 20 minutes long (``receive_duration``), in a loop.

* A call is a strong single-use query on the raw gRPC stream
  (:mod:`.streaming`): rows reach the caller as they arrive, not when the
  client's resumer sees a resume token.
* A batch is handed over when its ``SpannerLastBatchMessage`` row arrives. The
  server leases on while the call is open, read or not: the executor opens a
  stream only when it has free slots, asks for batches of at most those, and
  cancels it when a batch fills the worker (``Worker`` counts
  ``receive_ended_full``); rows sent after that are redelivered after their
  lease expires.
* A call that ends normally (its duration is up) is re-issued at once while the
  requested ``max_duration`` lasts; UNAVAILABLE / INTERNAL re-issue it with
  exponential backoff (``unavailable_backoff``, capped at 10 s, given up after 8
  failures in a row as :class:`BackendUnavailable`); other errors end the stream
  as agentq errors. Backoff waits end at once when the stream is cancelled.
* :meth:`ReceiveStream.cancel` may be called from any thread: it cancels the
  open call, so a worker stops within moments of SIGTERM, not at the end of a
  20-minute RECEIVE.
* Durations are written as the documents write them, in whole minutes
  (``'20m'``); a stream asked to last a time that is not whole minutes is ended
  by the client at its deadline (:mod:`.call_watch`).
* ``max_duration=0`` (``drain()``, the heartbeat monitor, tests) is one short
  receive. A strong read of the queue table first finds the keys due now
  (:mod:`.due`), leaving out the leases this backend holds (:mod:`.held`):
  nothing due, no RECEIVE. Otherwise a RECEIVE of ``'1m'`` (the documents'
  form) that yields every due message in batches, and that the client ends as
  soon as every expected key came (the server then has nothing left to lease:
  a cancel while it leases would strand what it leased), or once no row came
  for ``receive_short``'s quiet interval (2 s: the rest is leased elsewhere). No document shows a
  ``'0s'`` RECEIVE or promises what it leases; ``receive_short=0s`` sends one
  for an instance where it is seen to work.

Failure modes: rows sent on a cancelled or broken stream are leased but never
seen; they come back after their lease expires plus Spanner's redelivery backoff.
A row whose lease had already expired when it arrived (a slow reader, a long
GC pause) is skipped by the worker, as the documents' Go sample does.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

from agentq.backends.base import Message
from agentq.backends.spanner.api_errors import api_error
from agentq.backends.spanner.call_watch import CallWatch
from agentq.backends.spanner.dialect import minutes
from agentq.backends.spanner.due import Key, due_keys
from agentq.backends.spanner.streaming import strong_query
from agentq.backends.spanner.wire import from_wire, payload_bytes, utc
from agentq.backends.tags import make_tag
from agentq.errors import BackendUnavailable
from agentq.spec import QueueSpec

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["ReceiveStream"]

#: Consecutive failed RECEIVE calls before the stream gives up.
MAX_FAILURES = 8
#: How many due messages a short receive reads the keys of, and waits for.
SHORT_EXPECTED = 1000


class ReceiveStream:
    """Batches of leased messages for up to ``max_duration`` seconds (once if 0)."""

    def __init__(
        self, backend: SpannerBackend, spec: QueueSpec, max_batch_size: int, max_duration: float
    ) -> None:
        self._backend = backend
        self._spec = spec
        self._max_batch_size = max_batch_size
        self._max_duration = max_duration
        self._cancelled = threading.Event()
        self._calls_lock = threading.Lock()
        self._open: list[Any] = []
        self._batches: Generator[list[Message], None, None] = self._run()

    def __iter__(self) -> ReceiveStream:
        return self

    def __next__(self) -> list[Message]:
        return next(self._batches)

    def cancel(self) -> None:
        """End the stream from any thread: the open RECEIVE is cancelled."""
        self._cancelled.set()
        with self._calls_lock:
            calls = list(self._open)
        for call in calls:
            call.cancel()

    def close(self) -> None:
        """Stop reading (same thread as the reader): the open RECEIVE is cancelled."""
        self._cancelled.set()
        self._batches.close()

    def _run(self) -> Generator[list[Message], None, None]:
        backend, clock = self._backend, self._backend.clock
        if self._max_duration == 0:
            yield from self._receive_short()
            return
        deadline = clock.monotonic() + self._max_duration
        failures = 0
        while not backend.closed and not self._cancelled.is_set():
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return
            written = minutes(remaining)  # whole minutes, as the documents write it
            # A duration the server would overrun (not whole minutes) is cut here.
            cut = deadline if float(written[:-1]) * 60 > remaining + 1e-6 else None
            try:
                yield from self._receive_once(written, deadline=cut)
                failures = 0
            except gexc.GoogleAPIError as exc:
                if self._cancelled.is_set() or backend.closed:
                    return
                what = f"RECEIVE from {self._spec.name!r}"
                if not isinstance(exc, gexc.ServiceUnavailable | gexc.InternalServerError):
                    raise api_error(exc, what, backend.endpoint) from exc
                failures += 1
                if clock.monotonic() >= deadline:
                    return
                if failures > MAX_FAILURES:
                    raise BackendUnavailable(
                        f"{what} at {backend.endpoint} kept failing: {exc}"
                    ) from exc
                delay = min(backend.unavailable_backoff * 2 ** (failures - 1), 10.0)
                clock.wait(self._cancelled, delay)

    def _receive_short(self) -> Iterator[list[Message]]:
        """One RECEIVE for what is due now (see the module docstring), or with
        ``receive_short=0s`` one RECEIVE of ``'0s'``."""
        backend, form, spec = self._backend, self._backend.receive_short, self._spec
        if backend.closed or self._cancelled.is_set():
            return
        try:
            if form.zero:
                yield from self._receive_once("0s", deadline=None)
                return
            held = backend.held.live(spec.name, backend.clock.now())
            due = due_keys(backend, spec, SHORT_EXPECTED + len(held))
            expected = None if due is None else [k for k in due if k not in held]
            if expected == []:
                return  # nothing due that this process does not hold already
            yield from self._receive_once("1m", deadline=None, quiet=form.quiet, expected=expected)
        except gexc.GoogleAPIError as exc:
            if self._cancelled.is_set() or backend.closed:
                return
            raise api_error(exc, f"RECEIVE from {spec.name!r}", backend.endpoint) from exc

    def _receive_once(
        self,
        duration: str,
        *,
        deadline: float | None,
        quiet: float | None = None,
        expected: list[Key] | None = None,
    ) -> Iterator[list[Message]]:
        """One RECEIVE call, batches yielded as their last row arrives. The client
        ends it at ``deadline``, after ``quiet`` seconds without a row, or once every
        ``expected`` key came."""
        spec, held = self._spec, self._backend.held
        nkeys = len(spec.key)
        batch: list[Message] = []
        waiting = None if expected is None else set(expected)
        sql = self._backend.dialect.receive_sql(spec, self._max_batch_size, duration)
        # The call's own deadline: its duration plus the per-call allowance.
        timeout = float(duration[:-1]) * (60 if duration.endswith("m") else 1)
        timeout += self._backend.call_timeout
        tag = make_tag("receive", queue=spec.name)
        with strong_query(self._backend, sql, timeout=timeout, tag=tag) as (call, rows):
            self._track(call)
            watch = None
            if quiet is not None or deadline is not None:
                watch = CallWatch(call, self._backend.clock, quiet=quiet, deadline=deadline)
            try:
                for row in rows:
                    if watch is not None:
                        watch.touch()
                    key = tuple(
                        from_wire(v, c.type) for v, c in zip(row[:nkeys], spec.key, strict=True)
                    )
                    payload, deliver, expiry, token, last = row[nkeys : nkeys + 5]
                    message = Message(
                        queue=spec.name, key=key,
                        payload=spec.decode_payload(payload_bytes(spec, payload)),
                        deliver_time=utc(deliver), lease_token=str(token),
                        lease_expiry=utc(expiry), last_in_batch=bool(last),
                    )  # fmt: skip
                    held.received(spec.name, key, message.lease_token, message.lease_expiry)
                    batch.append(message)
                    if not last:
                        continue
                    out, batch = batch, []
                    if waiting is not None:
                        waiting.difference_update(m.key for m in out)
                    yield out
                    if waiting == set():
                        return  # what was due came: the call is cancelled on the way out
            except gexc.Cancelled:
                if watch is None or watch.fired is None:
                    raise
                # Ended here (quiet or deadline): hand over what was read.
            finally:
                if watch is not None:
                    watch.stop()
                self._untrack(call)
            if batch:
                batch[-1] = replace(batch[-1], last_in_batch=True)
                yield batch

    def _track(self, call: Any) -> None:
        with self._calls_lock:
            self._open.append(call)
        if self._cancelled.is_set():
            call.cancel()

    def _untrack(self, call: Any) -> None:
        with self._calls_lock:
            if call in self._open:
                self._open.remove(call)
