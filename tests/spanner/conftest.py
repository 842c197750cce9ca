from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("google.cloud.spanner")

from google.cloud.spanner_v1.database_sessions_manager import DatabaseSessionsManager

from agentq import FakeClock, open_backend
from agentq.backends.spanner import SpannerBackend

from .mock_server import QueueAwareAdminServicer, QueueAwareSpannerServicer, start_server


@pytest.fixture(scope="session", autouse=True)
def fast_session_maintenance() -> Iterator[None]:
    # Database.close() joins a maintenance thread that sleeps in 10-minute chunks.
    old = DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL
    DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = timedelta(milliseconds=50)
    yield
    DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = old


@pytest.fixture(scope="session")
def mock_server() -> Iterator[tuple[QueueAwareSpannerServicer, QueueAwareAdminServicer, int]]:
    svc, adm, server, port = start_server()
    yield svc, adm, port
    server.stop(grace=None)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound, never listening, and held
    for the test, so no test process running in parallel can start a server there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


@pytest.fixture
def svc(mock_server: Any) -> QueueAwareSpannerServicer:
    s: QueueAwareSpannerServicer = mock_server[0]
    s.reset()
    mock_server[1].clear_requests()
    mock_server[1].ddl.clear()
    return s


def spanner_url(port: int, dialect: str = "googlesql") -> str:
    return (
        f"spanner://projects/p/instances/i/databases/d?dialect={dialect}&endpoint=127.0.0.1:{port}"
    )


@pytest.fixture(params=["googlesql", "postgresql"])
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(mock_server: Any, svc: Any, dialect: str) -> Iterator[SpannerBackend]:
    b = open_backend(spanner_url(mock_server[2], dialect), clock=FakeClock())
    assert isinstance(b, SpannerBackend)
    yield b
    b.close()
