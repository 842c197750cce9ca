"""Backends the conformance suite runs against, and what each can show here.

Every backend in ``BACKENDS`` gets the same tests. A test declares what it
needs with ``@pytest.mark.needs(...)``; a backend lacking a capability skips
that test with the precise reason below, so the report says exactly what was
not verified where:

* ``sqlite-file``, ``sqlite-memory``: everything.
* ``spanner-mock``: the Spanner backend against google-cloud-spanner's gRPC mock.
  The mock stores no messages, so only what the client decides on its own is
  checked here (validation, identifiers, specs, error paths); the wire-level
  behaviour is covered in ``tests/spanner``.
* ``spanner-live``: a real endpoint from ``AGENTQ_SPANNER_TEST_URL`` (an
  Enterprise-edition database, or an emulator once it supports queues); skipped
  when unset. Spanner's clock cannot be faked, so fake-time tests skip there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Backend, open_backend
from agentq.clock import FakeClock, SystemClock

REASONS = {
    "state": "the gRPC mock stores no messages: needs a real Spanner database "
    "(set AGENTQ_SPANNER_TEST_URL)",
    "fake_time": "leases, delivery times and backoff run on Spanner's own clock, "
    "which a test cannot advance",
    "sqlite_sql": "the test's application SQL is SQLite's (tables created inside a transaction)",
    "exact_ack_result": "Spanner's Ack mutation is blind: it cannot report whether a message "
    "existed when ignore_not_found is set",
    "threads": "needs several backend objects on one database",
}

CAPABILITIES = {
    "sqlite-file": {"state", "fake_time", "sqlite_sql", "exact_ack_result", "threads"},
    "sqlite-memory": {"state", "fake_time", "sqlite_sql", "exact_ack_result", "threads"},
    "spanner-mock": set(),
    "spanner-live": {"state", "threads"},
}


@dataclass
class Harness:
    backend: Backend
    clock: FakeClock
    url: str
    kind: str
    capabilities: set[str] = field(default_factory=set)

    def reopen(self) -> Backend:
        """Another backend object on the same database (another 'worker').

        An in-memory database cannot be opened twice, so there the 'other worker'
        shares the backend object (and closing it is a no-op).
        """
        if self.kind == "sqlite-memory":
            return _Shared(self.backend)  # type: ignore[return-value]
        return open_backend(self.url, clock=self.clock)


class _Shared:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def close(self) -> None:
        pass


BACKENDS = list(CAPABILITIES)


@pytest.fixture(scope="session")
def spanner_mock_port() -> Iterator[int]:
    pytest.importorskip("google.cloud.spanner")
    from tests.spanner.mock_server import start_server

    _svc, _adm, server, port = start_server()
    yield port
    server.stop(grace=None)


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    kind = request.param
    capabilities = CAPABILITIES[kind]
    marker = request.node.get_closest_marker("needs")
    needed = set(marker.args) if marker else {"state", "fake_time", "sqlite_sql"}
    missing = sorted(needed - capabilities)
    if missing:
        pytest.skip(f"{kind}: " + "; ".join(REASONS[m] for m in missing))
    clock = FakeClock()
    if kind == "sqlite-file":
        url = f"sqlite:///{tmp_path / 'queue.db'}"
    elif kind == "sqlite-memory":
        url = "sqlite:///:memory:"
    elif kind == "spanner-mock":
        port = request.getfixturevalue("spanner_mock_port")
        url = f"spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:{port}"
    else:
        url = os.environ.get("AGENTQ_SPANNER_TEST_URL", "")
        if not url:
            pytest.skip("spanner-live: set AGENTQ_SPANNER_TEST_URL to run against a real database")
    backend = open_backend(url, clock=SystemClock() if kind == "spanner-live" else clock)
    yield Harness(backend, clock, url, kind, capabilities)
    backend.close()
