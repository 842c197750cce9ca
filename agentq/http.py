"""The HTTP client handlers use to call external APIs.

Every request carries ``Idempotency-Key: <task_id>``, so the external system
applies a task's side effect once however often it is delivered. The transport
refuses hosts and ports the tool's policy does not allow (the agent's arguments
cannot change that; where a name may lead is checked when the runtime's
transport connects, :mod:`agentq.http_guard`), retries transient failures in
place with tenacity, and turns HTTP 429/503 into
:class:`~agentq.retry.RetryLater` honouring ``Retry-After``.

httpx logs every request's full URL at INFO, userinfo and query included: agentq
installs a redacting filter on the ``httpx`` logger (:mod:`agentq.logs`), so an
application that turns INFO on for it sees ``user:REDACTED@`` and ``api_key=REDACTED``.
Errors raised here carry redacted text too (:mod:`agentq.redact`).

This module, and httpx and tenacity with it, is imported at a tool's first call
out (or a webhook's delivery), not with agentq: together they are about a third
of a second of every process start.
"""

from __future__ import annotations

import email.utils
import logging
from collections.abc import Sequence
from datetime import UTC

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
)

from agentq.clock import Clock
from agentq.errors import PolicyViolation
from agentq.logs import install_redaction
from agentq.policies.hosts import ALLOWED_HOSTS_EXTENSION, default_port, host_allowed
from agentq.redact import redact_text
from agentq.retry import PermanentError, RetryLater

__all__ = [
    "IDEMPOTENCY_HEADER",
    "NOT_SENT",
    "PolicyTransport",
    "SharedTransport",
    "checked",
    "host_allowed",
    "tool_http_client",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"
_RETRY_IN_PLACE = {502, 504}
_THROTTLED = {429, 503}

install_redaction(logging.getLogger("httpx"))


def _retry_after(response: httpx.Response, clock: Clock, default: float) -> float:
    """Seconds the server asks us to wait (RFC 9110 ``Retry-After``).

    Either delay-seconds (digits only) or an HTTP-date, read relative to the
    injected clock (a date in the past means now). Anything else (``-5``, ``inf``,
    ``1e9``, a broken date) is treated as if the header were absent: ``default``.
    No cap here: the executor judges the delay against the tool's policy, so the
    error it records can say which cap a delay exceeded.
    """
    value = response.headers.get("Retry-After")
    if value is None:
        return default
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return default
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # "-0000": HTTP-dates are always GMT
    return max((when - clock.now()).total_seconds(), 0.0)


def checked(response: httpx.Response, what: str) -> httpx.Response:
    """Classify an API's answer for the retry machinery: a 5xx is a transient
    failure (the task is retried with backoff), any other 4xx is permanent (the
    task goes to the dead-letter queue). 429/503 never get here: the transport
    already turned them into :class:`RetryLater`."""
    if response.status_code >= 500:
        raise RuntimeError(redact_text(f"{what} failed with {response.status_code}"))
    if response.status_code >= 400:
        # An API's error body may echo the request URL, credentials included.
        body = response.text[:200]
        raise PermanentError(redact_text(f"{what} refused: {response.status_code} {body}"))
    return response


#: Errors raised before a request left this machine: it cannot have applied.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


class PolicyTransport(httpx.BaseTransport):
    """Wraps a transport: host allow-list, idempotency key, in-place retries."""

    def __init__(
        self,
        inner: httpx.BaseTransport,
        *,
        tool: str,
        task_id: str,
        allowed_hosts: Sequence[str],
        clock: Clock,
        attempts: int = 3,
        throttle_default: float = 1.0,
        idempotency_key: str | None = None,
        resend: bool = True,
    ) -> None:
        self._inner = inner
        # A non-idempotent call (resend=False) is retried in place only when the
        # request never left: anything else may have applied at the provider.
        self._resend = resend
        self._tool = tool
        self._key = idempotency_key or task_id
        self._allowed = tuple(allowed_hosts)
        self._clock = clock
        self._attempts = attempts
        self._throttle_default = throttle_default

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):
            raise PolicyViolation(f"tool {self._tool!r}: scheme {request.url.scheme!r} refused")
        port = default_port(request.url.scheme, request.url.port)
        if not host_allowed(request.url.host, self._allowed, port):
            shown = f"{request.url.host}:{port}" if request.url.port else request.url.host
            raise PolicyViolation(
                f"tool {self._tool!r} may not call host {shown!r} "
                f"(allowed: {', '.join(self._allowed) or 'none'})"
            )
        # Where the name may lead is the connection's check (agentq.http_guard).
        request.extensions[ALLOWED_HOSTS_EXTENSION] = self._allowed
        request.headers[IDEMPOTENCY_HEADER] = self._key
        retrying = Retrying(
            retry=(
                retry_if_exception_type(httpx.TransportError)
                | retry_if_result(lambda r: r.status_code in _RETRY_IN_PLACE)
            ) if self._resend else retry_if_exception_type(NOT_SENT),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            stop=stop_after_attempt(self._attempts),
            sleep=self._clock.sleep,
            # Out of attempts: hand back the last 502/504 or re-raise the last error.
            retry_error_callback=lambda state: state.outcome.result(),  # type: ignore[union-attr]
        )
        response: httpx.Response = retrying(self._send, request)
        if response.status_code in _THROTTLED:
            after = _retry_after(response, self._clock, self._throttle_default)
            response.close()
            raise RetryLater(after, f"{request.url.host} answered {response.status_code}")
        return response

    def _send(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if response.status_code in _RETRY_IN_PLACE:
            response.read()
        return response

    def close(self) -> None:
        self._inner.close()


class SharedTransport(httpx.BaseTransport):
    """Lets per-task clients share the runtime's connection pool without closing it."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._inner.handle_request(request)

    def close(self) -> None:
        pass


def tool_http_client(
    *,
    tool: str,
    task_id: str,
    allowed_hosts: Sequence[str],
    clock: Clock,
    timeout: float = 30.0,
    transport: httpx.BaseTransport | None = None,
    idempotency_key: str | None = None,
    resend: bool = True,
) -> httpx.Client:
    """An httpx client for one task's handler. Its requests carry
    ``Idempotency-Key: <task_id>``, or ``idempotency_key`` where the lifecycle
    recorded one for the task (a completion webhook's ``<task_id>:<status>``).
    ``resend=False`` (a tool declared ``idempotent=False``): a request is retried
    in place only if it was never sent (connection refused or not made)."""
    return httpx.Client(
        transport=PolicyTransport(
            transport or httpx.HTTPTransport(),
            tool=tool,
            task_id=task_id,
            allowed_hosts=allowed_hosts,
            clock=clock,
            idempotency_key=idempotency_key,
            resend=resend,
        ),
        timeout=timeout,
        follow_redirects=False,
    )
