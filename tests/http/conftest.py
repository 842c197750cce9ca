"""Fixtures shared by the wait and HTTP tests: the loopback payments API, a
worker in another process, and a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentq import Runtime, SystemClock
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
def spawn_worker(
    db_url: str, api: DemoAPI, policies_dir: Path
) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Start a worker process on the test's database (stopped at teardown)."""
    procs: list[subprocess.Popen[str]] = []

    def spawn() -> subprocess.Popen[str]:
        env = {**os.environ, "AGENTQ_WEBHOOK_SECRET": WEBHOOK_SECRET}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.http._worker", db_url, api.url, str(policies_dir)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env,
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


# -- the HTTP server -------------------------------------------------------------

TOKENS = {
    "agent-token": ("refund-agent", {"enqueue", "read"}),
    "alice-token": ("alice", {"approve", "read"}),
    "reader-token": ("auditor", {"read"}),
    "admin-token": ("ops", {"admin"}),
}
WEBHOOK_SECRET = "test-webhook-secret"


def write_policies(directory: Path) -> Path:
    """The refund bot's policies, plus: webhooks may go to loopback, and
    request_shipping needs an Idempotency-Key."""
    directory.mkdir(parents=True, exist_ok=True)
    text = (ROOT / "policies" / "refunds.toml").read_text()
    text = text.replace("[tools.request_shipping]\n",
                        "[tools.request_shipping]\nrequire_idempotency_key = true\n")  # fmt: skip
    text += '\n[tools.agentq_webhook]\nallowed_hosts = ["127.0.0.1"]\n'
    (directory / "refunds.toml").write_text(text)
    return directory


def write_tokens(path: Path) -> Path:
    from agentq.server.auth import hash_token

    entries = []
    for token, (name, scopes) in TOKENS.items():
        entries.append(f'[[tokens]]\nname = "{name}"\nscopes = {sorted(scopes)!r}\n'
                       f'sha256 = "{hash_token(token)}"\n')  # fmt: skip
    path.write_text("\n".join(entries).replace("'", '"'))
    return path


@pytest.fixture
def policies_dir(tmp_path: Path) -> Path:
    return write_policies(tmp_path / "policies")


class LiveServer:
    """uvicorn serving an app on 127.0.0.1 in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import socket

        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, lifespan="off", log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        self.sock.close()

    def client(self, token: str | None = "agent-token") -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture
def runtime(db_url: str, api: DemoAPI, policies_dir: Path) -> Iterator[Runtime]:
    rt = Runtime(db_url, tools=ROOT / "tools", policies=policies_dir, clock=SystemClock(),
                 settings={**settings_for(api), "webhook_secret": WEBHOOK_SECRET})  # fmt: skip
    yield rt
    rt.close()


@pytest.fixture
def server(runtime: Runtime, tmp_path: Path) -> Iterator[LiveServer]:
    from agentq.server import TokenAuth, create_app

    auth = TokenAuth.from_file(write_tokens(tmp_path / "tokens.toml"))
    live = LiveServer(create_app(runtime, auth=auth, max_wait=30)).start()
    yield live
    live.stop()
