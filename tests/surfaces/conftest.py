"""Shared by the MCP server and framework adapter tests: the project's own tools
and policies, a real SQLite file, the loopback payments API, and a worker thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentq import Runtime
from agentq.demo_server import DemoAPI

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentq.db'}"


@pytest.fixture
def open_rt(db_url: str, api: DemoAPI) -> Iterator[Callable[[], Runtime]]:
    """Opens runtimes on one database file (a restarted server opens a new one)."""
    opened: list[Runtime] = []

    def open_one() -> Runtime:
        rt = Runtime(
            db_url, tools=ROOT / "tools", policies=ROOT / "policies",
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
