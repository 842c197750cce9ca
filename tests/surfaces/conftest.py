"""Shared by the MCP server and framework adapter tests: the project's own tools
and policies, the database (a real SQLite file, and a PostgreSQL database when a
test server is there), the loopback payments API, and a worker thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentq import Agent, Runtime
from agentq.demo_server import DemoAPI
from tests.postgres.server import BACKENDS, database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


_ADAPTER = (
    "an agent framework's adapter over Runtime's Python API, which the runtime and MCP "
    "tests run on PostgreSQL"
)
#: Surface tests that run on SQLite only, and why: what they test is above the
#: backend. The MCP server's tests run on PostgreSQL as well.
SQLITE_ONLY = {
    "test_langchain.py": _ADAPTER,
    "test_openai_agents.py": _ADAPTER,
    "test_pydantic_ai.py": _ADAPTER,
    "test_the_http_transport_will_not_start_without_authentication": "refused before a "
    "database is opened",
}


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test's database: a SQLite file, or a fresh database on the test PostgreSQL
    server (skipped without one; a failure under CI)."""
    return database_url(request, tmp_path, SQLITE_ONLY)


@pytest.fixture
def open_rt(db_url: str, api: DemoAPI) -> Iterator[Callable[..., Runtime]]:
    """Opens runtimes on one database file (a restarted server opens a new one),
    with the project's policies or those of ``policies``, and ``agents``."""
    opened: list[Runtime] = []

    def open_one(policies: Path = ROOT / "policies", agents: Sequence[Agent] = ()) -> Runtime:
        rt = Runtime(
            db_url, tools=ROOT / "tools", policies=policies, agents=list(agents),
            settings={"payments_url": api.url, "notifications_url": api.url,
                      "shipping_url": api.url},
        )  # fmt: skip
        opened.append(rt)
        return rt

    yield open_one
    for rt in opened:
        rt.close()


@pytest.fixture
def rt(open_rt: Callable[[], Runtime]) -> Runtime:
    return open_rt()


@contextmanager
def worker_thread(rt: Runtime) -> Iterator[None]:
    """A real worker serving ``rt``'s queues until the block ends."""
    stop = threading.Event()
    worker = rt.worker(concurrency=2)
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive(), "worker did not stop"
