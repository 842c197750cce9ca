"""Client errors outside transactions as agentq errors naming the endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from google.api_core import exceptions as gexc

from agentq.errors import AgentQError, BackendUnavailable, DatabaseNotWritable

__all__ = ["API_ERRORS", "api_error", "mapped_errors"]

#: What the client raises for a failed call: API errors and exhausted retries.
API_ERRORS = (gexc.GoogleAPIError,)


def api_error(exc: gexc.GoogleAPIError, what: str, endpoint: str) -> AgentQError:
    """``exc`` from ``what`` (e.g. "RENEWLEASE on 'Jobs'") as an agentq error."""
    cause = exc.cause if isinstance(exc, gexc.RetryError) and exc.cause is not None else exc
    message = getattr(cause, "message", None) or str(cause)
    if isinstance(cause, gexc.PermissionDenied):
        return DatabaseNotWritable(f"{what}: Spanner refused it (permission): {message}")
    if isinstance(exc, gexc.RetryError) or isinstance(
        cause, gexc.ServiceUnavailable | gexc.DeadlineExceeded
    ):
        return BackendUnavailable(
            f"{what}: Spanner at {endpoint} did not answer in time (unreachable or "
            f"overloaded): {message}"
        )
    return BackendUnavailable(f"{what} failed at {endpoint}: {message}")


@contextmanager
def mapped_errors(what: str, endpoint: str) -> Iterator[None]:
    """Raise the client's errors inside as :func:`api_error` of ``what``."""
    try:
        yield
    except API_ERRORS as exc:
        raise api_error(exc, what, endpoint) from exc
