"""``renew``: ``RENEWLEASE_<queue>`` in a strong single-use query, sent once.

The query goes out on the raw stream (:mod:`.streaming`): the client's resumer
would re-send it after a dropped connection, and a second RENEWLEASE with tokens
the first one already replaced returns no rows for them, which the worker would
take for lost leases. A failed call raises instead; the worker keeps the tokens
and tries again (see :mod:`agentq.executor.leases`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentq.backends.base import Renewal
from agentq.backends.spanner.api_errors import mapped_errors
from agentq.backends.spanner.streaming import string_array_param, strong_query
from agentq.backends.spanner.wire import utc
from agentq.backends.tags import make_tag

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["renew_leases"]


def renew_leases(backend: SpannerBackend, queue: str, tokens: Sequence[str]) -> list[Renewal]:
    """Extend the leases of ``tokens``; a token without a row has lost its lease."""
    tokens = [t for t in tokens if isinstance(t, str)]
    if not tokens:
        return []
    d = backend.dialect
    params = string_array_param("p1" if d.postgres else "tokens", tokens)
    with (
        mapped_errors(f"RENEWLEASE on {queue!r}", backend.endpoint),
        strong_query(
            backend,
            d.renew_sql(queue),
            timeout=backend.call_timeout,
            params=params,
            tag=make_tag("renew", queue=queue),
        ) as (
            _,
            rows,
        ),
    ):
        found = list(rows)
    renewals = [
        Renewal(str(old), None if new is None else str(new), utc(exp)) for old, new, exp in found
    ]
    for r in renewals:
        backend.held.renewed(r.old_token, r.new_token, r.lease_expiry)
    return renewals
