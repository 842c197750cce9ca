"""``stream``: streaming ``RECEIVE_<queue>`` calls read from the raw gRPC stream.

A strong, single-use streaming query, read from the raw gRPC stream: the
client's resume-token buffering (``snapshot.execute_sql``) would hold rows back
until the stream ends, long after their 10 s leases expired. The call is
cancelled when the caller stops reading, and re-issued with backoff on
UNAVAILABLE.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc
from google.cloud.spanner_v1 import ExecuteSqlRequest, TransactionOptions, TransactionSelector
from google.cloud.spanner_v1.database_sessions_manager import TransactionType
from google.cloud.spanner_v1.streamed import StreamedResultSet

from agentq.backends.base import Message
from agentq.backends.spanner.wire import from_wire, payload_bytes, utc
from agentq.errors import BackendUnavailable
from agentq.spec import QueueSpec

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["receive_stream"]


def receive_stream(
    backend: SpannerBackend, spec: QueueSpec, max_batch_size: int, max_duration: float
) -> Iterator[list[Message]]:
    """Batches of leased messages for up to ``max_duration`` seconds (once if 0)."""
    clock = backend.clock
    deadline = clock.monotonic() + max_duration
    failures = 0
    first = True
    while not backend.closed:
        remaining = deadline - clock.monotonic()
        if remaining <= 0 and not first:
            return
        first = False
        seconds = max(int(remaining + 0.999), 0)
        sql = backend.dialect.receive_sql(spec, max_batch_size, seconds)
        try:
            yield from _receive_once(backend, spec, sql)
            failures = 0
        except (gexc.ServiceUnavailable, gexc.InternalServerError) as exc:
            failures += 1
            if clock.monotonic() >= deadline:
                return
            delay = min(backend.unavailable_backoff * 2 ** (failures - 1), 10.0)
            if failures > 8:
                raise BackendUnavailable(f"RECEIVE kept failing: {exc}") from exc
            clock.sleep(delay)
        except gexc.GoogleAPICallError as exc:
            raise BackendUnavailable(f"RECEIVE from {spec.name!r} failed: {exc}") from exc


def _receive_once(backend: SpannerBackend, spec: QueueSpec, sql: str) -> Iterator[list[Message]]:
    """One RECEIVE call on the raw stream, batches yielded as their last row arrives."""
    database = backend.database
    session = database.sessions_manager.get_session(TransactionType.READ_ONLY)
    request = ExecuteSqlRequest(
        session=session.name,
        sql=sql,
        transaction=TransactionSelector(
            single_use=TransactionOptions(read_only=TransactionOptions.ReadOnly(strong=True))
        ),
    )
    call = database.spanner_api.execute_streaming_sql(
        request=request,
        metadata=[("google-cloud-resource-prefix", database.name)],
        timeout=max(backend.transaction_timeout, 3600),
    )
    backend.track_call(call)
    nkeys = len(spec.key)
    batch: list[Message] = []
    try:
        for row in StreamedResultSet(call):
            key = tuple(from_wire(v, c.type) for v, c in zip(row[:nkeys], spec.key, strict=True))
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
        # The caller stopped reading (or the stream ended): cancel the RPC so the
        # server stops leasing messages to a reader that is gone.
        call.cancel()
        backend.untrack_call(call)
        database.sessions_manager.put_session(session)
