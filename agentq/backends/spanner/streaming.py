"""One strong single-use query on the raw gRPC stream, without the client's resumes.

``snapshot.execute_sql`` wraps the stream in a resumer that buffers rows until a
resume token arrives (a RECEIVE's rows could wait past their 10 s leases) and
re-sends the query after a dropped connection (a second RENEWLEASE with tokens
the first one already replaced answers "no row": a falsely lost lease). Queue
queries are therefore sent once, here, and a failure surfaces as an error for
the caller to decide on.

The call goes through the transport's own stub (``spanner_api.transport``),
not the generated client's method: that one waits for the stream's first
response before it returns the call, so a RECEIVE whose server sends nothing
until a message is ready could not be cancelled meanwhile (not by a stopping
worker, nor after a short receive's quiet interval). The stub's errors are
mapped to the client's exceptions here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import grpc
from google.api_core import exceptions as gexc
from google.api_core.gapic_v1 import routing_header
from google.cloud.spanner_v1 import (
    ExecuteSqlRequest,
    RequestOptions,
    TransactionOptions,
    TransactionSelector,
    param_types,
)
from google.cloud.spanner_v1.database_sessions_manager import TransactionType
from google.cloud.spanner_v1.streamed import StreamedResultSet
from google.protobuf.struct_pb2 import ListValue, Struct, Value

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["string_array_param", "strong_query"]


def string_array_param(name: str, values: Sequence[str]) -> tuple[Struct, dict[str, Any]]:
    """``params`` and ``param_types`` of one ARRAY<STRING> parameter."""
    params = Struct(
        fields={name: Value(list_value=ListValue(values=[Value(string_value=v) for v in values]))}
    )
    return params, {name: param_types.Array(param_types.STRING)}


@contextmanager
def strong_query(
    backend: SpannerBackend,
    sql: str,
    *,
    timeout: float,
    params: tuple[Struct, dict[str, Any]] | None = None,
    tag: str | None = None,
) -> Iterator[tuple[Any, StreamedResultSet]]:
    """The call and the rows of ``sql`` as they arrive; the call is cancelled (it
    may also be cancelled from another thread) when the block ends. ``tag`` is
    the request tag Spanner's query statistics show."""
    database = backend.database
    session = database.sessions_manager.get_session(TransactionType.READ_ONLY)
    request = ExecuteSqlRequest(
        session=session.name,
        sql=sql,
        transaction=TransactionSelector(
            single_use=TransactionOptions(read_only=TransactionOptions.ReadOnly(strong=True))
        ),
    )
    if params is not None:
        request.params, request.param_types = params
    if tag is not None:
        request.request_options = RequestOptions(request_tag=tag)
    metadata = [
        ("google-cloud-resource-prefix", database.name),
        routing_header.to_grpc_metadata((("session", session.name),)),
    ]
    # Sent once (see the module docstring), and returned before any response.
    call = _Call(
        database.spanner_api.transport.execute_streaming_sql(
            request, timeout=timeout, metadata=metadata
        )
    )
    backend.track_call(call)
    try:
        yield call, StreamedResultSet(call)
    finally:
        call.cancel()
        backend.untrack_call(call)
        database.sessions_manager.put_session(session)


class _Call:
    """A streaming call whose errors are the client library's exceptions."""

    def __init__(self, rendezvous: Any) -> None:
        self._rendezvous = rendezvous

    def __iter__(self) -> _Call:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._rendezvous)
        except grpc.RpcError as exc:
            raise gexc.from_grpc_error(exc) from exc

    def cancel(self) -> None:
        """End the call (from any thread); its reader gets ``Cancelled``."""
        self._rendezvous.cancel()
