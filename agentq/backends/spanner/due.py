"""``due_keys``: which messages of a queue a short receive can expect.

A one-shot receive is a RECEIVE the client cancels after a quiet interval (see
:mod:`.call_watch`), so an empty queue would cost that interval every time
(``drain()`` rounds, the heartbeat monitor every beat). A strong read of the
queue table first (the documents read queue tables with SQL to find stuck
messages) tells which keys are due: no RECEIVE is sent when none is (leaving
out the leases this backend holds itself, :mod:`.held`), and the RECEIVE ends
as soon as the ones expected have come.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud.spanner_v1 import param_types

from agentq.backends.spanner.api_errors import API_ERRORS, api_error
from agentq.backends.spanner.wire import from_wire
from agentq.backends.tags import make_tag
from agentq.spec import QueueSpec

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["Key", "due_keys"]

Key = tuple[Any, ...]


def due_keys(backend: SpannerBackend, spec: QueueSpec, limit: int) -> list[Key] | None:
    """Keys of up to ``limit`` messages of the queue that are due (leased ones
    included: SQL cannot see leases), by the server's clock or the backend's.
    ``None`` when this database role may not read the queue (fine-grained
    access control: receiving needs no ``SELECT``); asked once, then never again."""
    if spec.name in backend.undue_unknown:
        return None
    d = backend.dialect
    try:
        with backend.database.snapshot() as snap:
            rows = list(
                snap.execute_sql(
                    d.due_sql(spec, limit),
                    params=d.param_dict(["now"], [backend.clock.now()]),
                    param_types={d.param_keys(["now"])[0]: param_types.TIMESTAMP},
                    request_options={"request_tag": make_tag("due", queue=spec.name)},
                )
            )
    except gexc.PermissionDenied:
        backend.undue_unknown.add(spec.name)
        return None
    except API_ERRORS as exc:
        what = f"reading which messages of {spec.name!r} are due"
        raise api_error(exc, what, backend.endpoint) from exc
    return [
        tuple(from_wire(v, c.type) for v, c in zip(row, spec.key, strict=True)) for row in rows
    ]
