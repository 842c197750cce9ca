"""Fixtures shared by the wait and HTTP tests: the database (SQLite, and PostgreSQL
when a test server is there), the loopback payments API, a worker in another
process, and a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentq import Runtime, SystemClock
from agentq.demo_server import DemoAPI
from tests.postgres.server import BACKENDS, database_url

ROOT = Path(__file__).resolve().parents[2]

try:  # the HTTP API's extra: pip install -e '.[http]'
    import sse_starlette  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError:
    if os.environ.get("CI"):
        raise  # CI installs the extra: its absence is a failure there
    # Locally without the extra: only rt.wait's tests run.
    collect_ignore_glob = [p.name for p in Path(__file__).parent.glob("test_*.py")
                           if p.name != "test_wait.py"]  # fmt: skip


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


_KILLED_SERVER = (
    "a killed server's webhook is redelivered by the queue path that "
    "test_a_worker_killed_after_the_payments_call_charges_once runs on PostgreSQL"
)
#: HTTP tests that run on SQLite only, and why: what they test is above the backend,
#: and running them twice would cost the suite more time than it shows. The rest
#: (the API, long-polls, waits, a worker killed mid-task, owners and scopes, dedupe,
#: paging, approval edits, webhooks) run on PostgreSQL as well.
SQLITE_ONLY = {
    "test_schemathesis.py": "fuzzes the HTTP layer against its spec for two minutes: the "
    "same validation code on every backend",
    "test_latency.py": "a measurement, not a check (50 long-polls); on PostgreSQL another "
    "process's completion reaches a long-poll by the poll_interval (docs/how-to/postgres.md)",
    "test_client_errors.py": "requests refused before the backend is reached",
    "test_public_spec.py": "the spec and docs pages hold no data",
    "test_a_redirect_is_a_failed_delivery_retried_then_dead": "the webhook client's handling "
    "of a redirect; the webhooks' queue path runs on PostgreSQL in the other webhook tests",
    "test_a_server_killed_between_the_completion_commit_and_the_webhook_delivers_once": (
        _KILLED_SERVER
    ),
    "test_a_server_killed_while_delivering_the_webhook_delivers_it_once": _KILLED_SERVER,
}


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test's database: a SQLite file, or a fresh database on the test PostgreSQL
    server (skipped without one; a failure under CI)."""
    return database_url(request, tmp_path, SQLITE_ONLY)


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
        # Accepted sockets inherit it: without, every answer waits ~40 ms (Nagle and
        # delayed ACKs), as it does not when uvicorn binds the socket itself.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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


# -- a webhook receiver ---------------------------------------------------------------


class WebhookReceiver:
    """A webhook endpoint on loopback: 503 while ``down``; applies each
    Idempotency-Key once and checks every signature."""

    def __init__(self) -> None:
        self.down = True
        #: When set, every delivery is answered with this status (a redirect has a
        #: Location) instead of 503/200, and nothing is applied.
        self.answer: int | None = None
        #: Called after a delivery was applied, before it is answered (a crash window).
        self.on_applied: Callable[[], None] | None = None
        self.attempts: list[str] = []
        self.applied: dict[str, dict[str, Any]] = {}
        self.bad_signatures = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                applied = receiver.receive(self.headers, body)
                if applied and receiver.on_applied is not None:
                    receiver.on_applied()
                status = 503 if receiver.down else 200
                if receiver.answer is not None:
                    status = receiver.answer
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", receiver.url + "/elsewhere")
                if status == 503:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receive(self, headers: Any, body: bytes) -> bool:
        """Record one delivery; whether it was applied now (its key's first)."""
        webhook_id = headers["webhook-id"]
        content = f"{webhook_id}.{headers['webhook-timestamp']}.".encode() + body
        expected = "v1," + base64.b64encode(
            hmac.new(WEBHOOK_SECRET.encode(), content, hashlib.sha256).digest()).decode()
        with self.lock:
            self.attempts.append(headers["Idempotency-Key"])
            if not hmac.compare_digest(expected, headers["webhook-signature"]):
                self.bad_signatures += 1
            elif (not self.down and self.answer is None
                  and headers["Idempotency-Key"] not in self.applied):  # fmt: skip
                self.applied[headers["Idempotency-Key"]] = json.loads(body)
                return True
        return False

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    r = WebhookReceiver()
    yield r
    r.close()
