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
* ``max_duration=0`` is one RECEIVE of ``'0s'`` (``drain()``: tests, notebooks).

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
        deadline = clock.monotonic() + self._max_duration
        failures = 0
        first = True
        while not backend.closed and not self._cancelled.is_set():
            remaining = deadline - clock.monotonic()
            if remaining <= 0 and not first:
                return
            first = False
            seconds = max(int(remaining + 0.999), 0)
            sql = backend.dialect.receive_sql(self._spec, self._max_batch_size, seconds)
            try:
                yield from self._receive_once(sql, seconds)
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

    def _receive_once(self, sql: str, seconds: int) -> Iterator[list[Message]]:
        """One RECEIVE call, batches yielded as their last row arrives."""
        spec = self._spec
        nkeys = len(spec.key)
        batch: list[Message] = []
        # The call's own deadline: its duration plus the per-call allowance.
        timeout = seconds + self._backend.call_timeout
        tag = make_tag("receive", queue=spec.name)
        with strong_query(self._backend, sql, timeout=timeout, tag=tag) as (call, rows):
            self._track(call)
            try:
                for row in rows:
                    key = tuple(
                        from_wire(v, c.type) for v, c in zip(row[:nkeys], spec.key, strict=True)
                    )
                    payload, deliver, expiry, token, last = row[nkeys : nkeys + 5]
                    batch.append(
                        Message(
                            queue=spec.name, key=key,
                            payload=spec.decode_payload(payload_bytes(spec, payload)),
                            deliver_time=utc(deliver), lease_token=str(token),
                            lease_expiry=utc(expiry), last_in_batch=bool(last),
                        )
                    )  # fmt: skip
                    if last:
                        out, batch = batch, []
                        yield out
                if batch:
                    batch[-1] = replace(batch[-1], last_in_batch=True)
                    yield batch
            finally:
                self._untrack(call)

    def _track(self, call: Any) -> None:
        with self._calls_lock:
            self._open.append(call)
        if self._cancelled.is_set():
            call.cancel()

    def _untrack(self, call: Any) -> None:
        with self._calls_lock:
            if call in self._open:
                self._open.remove(call)
