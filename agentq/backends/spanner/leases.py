"""``renew``: ``RENEWLEASE_<queue>`` in a strong single-use snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc
from google.cloud.spanner_v1 import param_types

from agentq.backends.base import Renewal
from agentq.backends.spanner.wire import utc
from agentq.errors import BackendUnavailable

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["renew_leases"]


def renew_leases(backend: SpannerBackend, queue: str, tokens: Sequence[str]) -> list[Renewal]:
    """Extend the leases of ``tokens``; a token without a row has lost its lease."""
    tokens = [t for t in tokens if isinstance(t, str)]
    if not tokens:
        return []
    d = backend.dialect
    key = "p1" if d.postgres else "tokens"
    try:
        with backend.database.snapshot() as snap:  # strong single-use read
            rows = list(
                snap.execute_sql(
                    d.renew_sql(queue),
                    params={key: list(tokens)},
                    param_types={key: param_types.Array(param_types.STRING)},
                )
            )
    except gexc.GoogleAPICallError as exc:
        raise BackendUnavailable(f"RENEWLEASE on {queue!r} failed: {exc}") from exc
    return [
        Renewal(str(old), None if new is None else str(new), utc(exp)) for old, new, exp in rows
    ]
