"""Connections to allowed addresses only: the transport under every tool's
``ctx.http`` (and every completion webhook).

:class:`~agentq.http.PolicyTransport` checks a request's host and port against
the tool's ``allowed_hosts``; that says nothing about where the name *leads*. An
agent's callback URL on an allowed name, or a partner's DNS that answers with
169.254.169.254 (the cloud's metadata service) or 10.0.0.5 (the database), would
otherwise carry the request inside. :class:`GuardedTransport` is the runtime's
default transport: it resolves each name once, keeps only the addresses the
rule allows (:func:`agentq.policies.hosts.address_allowed`: public ones, and
the non-public ones the list names explicitly) and connects to exactly such an
address, so a DNS answer that changes between a check and the connection (DNS
rebinding) cannot slip through. A name with no allowed address is a
:class:`~agentq.errors.PolicyViolation` (the task is dead-lettered, as for a
host the list does not name).

The tool's list reaches the transport with the request (the
``agentq.allowed_hosts`` request extension that ``PolicyTransport`` sets); one
connection pool is kept per set of explicitly allowed networks, so a kept-alive
connection made under one tool's rule is never reused under another's. A
transport given to ``Runtime(http_transport=...)`` is used as it is: it makes
its own connections, unguarded.
"""

from __future__ import annotations

import socket
import threading
import typing
from collections.abc import Callable, Sequence
from typing import Any

import httpcore
import httpx

from agentq.errors import PolicyViolation
from agentq.policies.hosts import (
    ALLOWED_HOSTS_EXTENSION,
    IPNetwork,
    address_allowed,
    explicit_networks,
)

__all__ = ["GuardedBackend", "GuardedTransport"]

Explicit = tuple[tuple[IPNetwork, int | None], ...]
Resolver = Callable[..., list[Any]]


class GuardedBackend(httpcore.NetworkBackend):
    """An httpcore network backend that resolves a name once and connects only to
    an address ``explicit`` (or being public) allows."""

    def __init__(self, explicit: Explicit, resolve: Resolver | None = None) -> None:
        self._explicit = explicit
        self._resolve = resolve
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        resolve = self._resolve or socket.getaddrinfo  # looked up now: tests replace it
        try:
            answers = resolve(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in answers))
        allowed = [a for a in addresses if address_allowed(a, port, self._explicit)]
        if not allowed:
            raise PolicyViolation(
                f"{host!r} resolves to {', '.join(addresses) or 'nothing'}: not a public "
                "address, and allowed_hosts names none of them (list the address or its "
                "network, e.g. 10.0.0.0/8, or localhost for loopback, to allow it)"
            )
        last: Exception | None = None
        for address in allowed:  # the addresses checked, never the name again
            try:
                return self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options,
                )  # fmt: skip
            except httpcore.ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: typing.Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # fmt: skip
        raise PolicyViolation("tools connect over TCP only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class GuardedTransport(httpx.BaseTransport):
    """The runtime's default transport: ``httpx.HTTPTransport`` connection pools
    whose connections go to allowed addresses only (see the module docstring).
    ``resolve`` replaces :func:`socket.getaddrinfo` (tests)."""

    def __init__(self, *, resolve: Resolver | None = None) -> None:
        self._resolve = resolve
        self._lock = threading.Lock()
        self._pools: dict[Explicit, httpx.HTTPTransport] = {}
        self._ssl: Any = None

    def _pool(self, explicit: Explicit) -> httpx.HTTPTransport:
        with self._lock:
            pool = self._pools.get(explicit)
            if pool is None:
                if self._ssl is None:  # loading the CA certificates costs 50-250 ms: once
                    self._ssl = httpx.create_ssl_context()
                pool = httpx.HTTPTransport(verify=self._ssl)
                # httpx takes no network backend; its pool is httpcore's, which does.
                pool._pool = httpcore.ConnectionPool(
                    ssl_context=self._ssl,
                    network_backend=GuardedBackend(explicit, self._resolve),
                    # httpx's own defaults (httpx.HTTPTransport's limits).
                    max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0,
                )  # fmt: skip
                self._pools[explicit] = pool
            return pool

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        patterns: Sequence[str] = request.extensions.get(ALLOWED_HOSTS_EXTENSION, ())
        return self._pool(explicit_networks(patterns)).handle_request(request)

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
