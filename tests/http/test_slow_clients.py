"""Issue 27 item 11: the API (``agentq serve``), the console (``agentq ui``) and
the MCP HTTP transport (``agentq mcp --transport http``) cut off slow and idle
clients: a connection that sends nothing, a head trickled a byte at a time
(slowloris), a body that never completes, an idle keep-alive connection. Before,
uvicorn waited for ever for a request's head and body: one client could hold
any number of connections open.

Each server is the real command in its own process on 127.0.0.1, with
``[servers]`` limits of one second from ``agentq.toml``, and the clients are raw
sockets. Real time is the point here (a client that is slow in fact); every wait
is bounded by ``BOUND``, well above the limits.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http._serving import url_told

ROOT = Path(__file__).resolve().parents[2]
BOUND = 15.0  # seconds: the limits are 1 s; a server that never cuts off fails here
LIMITS = "[servers]\nheader_timeout = 1\nbody_timeout = 1\nkeep_alive_timeout = 1\n"

pytestmark = pytest.mark.slow

JSON, FORM = "application/json", "application/x-www-form-urlencoded"
#: The command, and a request whose body it reads (line, content type).
SERVERS = {
    "serve": (["serve", "--insecure-local"], ("POST /v1/tools/execute_refund/actions", JSON)),
    "ui": (["ui", "--insecure-local"], ("POST /console/login", FORM)),
    "mcp": (["mcp", "--transport", "http", "--insecure-local"], ("POST /mcp", JSON)),
}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    tuple[str, int]
]:  # fmt: skip
    """(name, port) of one of the three servers, running with one-second limits."""
    name = request.param
    args, _ = SERVERS[name]
    folder = tmp_path_factory.mktemp(name)
    config = folder / "agentq.toml"
    config.write_text(
        f'[agentq]\ndb = "sqlite:///{folder / "a.db"}"\ntools = "{ROOT / "tools"}"\n'
        f'policies = "{ROOT / "policies"}"\n\n{LIMITS}'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", *args, "--config", str(config), "--port", "0"],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        port = int(url_told(proc).rsplit(":", 1)[1])
        yield name, port
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    sock.settimeout(BOUND)
    return sock


def _until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took;
    a server that keeps the connection open past ``BOUND`` fails the test."""
    start = time.monotonic()
    got = b""
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"still open after {BOUND} s; sent {got[:200]!r}") from None
        except ConnectionResetError:
            data = b""
        if not data:
            return got, time.monotonic() - start
        got += data


def test_a_connection_that_sends_nothing_is_closed(served: tuple[str, int]) -> None:
    _, port = served
    with _connect(port) as sock:
        _, took = _until_closed(sock)
    assert took < BOUND


def test_a_head_trickled_a_byte_at_a_time_is_cut_off(served: tuple[str, int]) -> None:
    _, port = served
    with _connect(port) as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        start = time.monotonic()
        # A slowloris client: a header byte every 0.2 s, never the blank line.
        sock.settimeout(0.2)
        answer = b""
        try:
            while time.monotonic() - start < BOUND:
                sock.sendall(b"X")
                try:
                    answer += sock.recv(65536)
                    if answer:
                        break
                except TimeoutError:
                    continue
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed under the client's feet: cut off
        sock.settimeout(BOUND)
        rest, _ = _until_closed(sock)
        took = time.monotonic() - start
    assert took < BOUND, "the trickling client was never cut off"
    text = answer + rest
    assert not text or text.startswith(b"HTTP/1.1 408"), text[:200]


def test_a_body_that_never_completes_is_408(served: tuple[str, int]) -> None:
    name, port = served
    line, kind = SERVERS[name][1]
    with _connect(port) as sock:
        sock.sendall(
            f"{line} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {kind}\r\n"
            "Accept: application/json, text/event-stream\r\n"
            f"Content-Length: 100\r\n\r\n{{\"args\": ".encode()
        )
        answer, took = _until_closed(sock)
    assert took < BOUND
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]


def test_an_idle_keep_alive_connection_is_closed(served: tuple[str, int]) -> None:
    _, port = served
    with _connect(port) as sock:
        sock.sendall(f"GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        answer, took = _until_closed(sock)  # the answer, then idle until closed
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    assert b"connection: close" not in answer.lower()  # it was kept alive, then cut off
    assert took < BOUND
