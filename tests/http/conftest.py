"""Fixtures shared by the wait and HTTP tests: the loopback payments API and a
worker in another process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentq.demo_server import DemoAPI

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentq.db'}"


def settings_for(api: DemoAPI) -> dict[str, str]:
    return {"payments_url": api.url, "notifications_url": api.url, "shipping_url": api.url}


@pytest.fixture
def spawn_worker(db_url: str, api: DemoAPI) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Start a worker process on the test's database (stopped at teardown)."""
    procs: list[subprocess.Popen[str]] = []

    def spawn() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.http._worker", db_url, api.url],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
