"""Issue 27 item 11, the worker's metrics port: idle connections hold no
threads. It used to answer each connection with a thread of its own
(``ThreadingHTTPServer``): 200 idle sockets added 200 threads to the worker
process. Now heads are read in a selector and answered from a bounded pool, and
a connection that sends no whole request within ``header_timeout`` is closed.

A real ``agentq worker --metrics-port 0`` process; its threads are counted from
``/proc`` (Linux). Real time only for the server's own cut-off of the idle
sockets (the point), bounded.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._project import agentq, make_project

pytestmark = pytest.mark.slow
IDLE = 200
THREADS = 2
BOUND = 30.0


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
    assert found is not None
    return int(found.group(1))


@pytest.fixture
def metrics_worker(tmp_path: Path) -> Iterator[tuple[int, str]]:
    try:
        import opentelemetry.exporter.prometheus  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise  # .ci/run installs agentq-runtime[metrics]: its absence there is a failure
        pytest.skip("opentelemetry-exporter-prometheus is not installed (agentq-runtime[metrics])")
    if not Path("/proc/self/status").exists():
        pytest.skip("counts threads from /proc (Linux)")
    make_project(tmp_path)
    assert agentq("init", cwd=tmp_path).returncode == 0
    (tmp_path / "agentq.toml").write_text(
        f"[servers]\nheader_timeout = 2\nmetrics_threads = {THREADS}\n"
    )
    log = (tmp_path / "worker.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "worker", "--metrics-port", "0",
         "--metrics-insecure-local"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=log, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            told = (tmp_path / "worker.log").read_text()
            found = re.search(r"metrics on (http://127\.0\.0\.1:\d+)", told)
            url = found.group(1) if found else None
            assert proc.poll() is None and time.monotonic() < deadline, told
            time.sleep(0.05)
        yield proc.pid, url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def _scrape(url: str) -> bytes:
    with urllib.request.urlopen(f"{url}/metrics", timeout=BOUND) as answer:
        assert answer.status == 200
        return bytes(answer.read())


def test_idle_connections_hold_no_threads_and_are_dropped(
    metrics_worker: tuple[int, str],
) -> None:
    pid, url = metrics_worker
    port = int(url.rsplit(":", 1)[1])
    assert b"agentq_worker_in_flight" in _scrape(url)  # the pool's thread exists now
    before = _threads(pid)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=BOUND) for _ in range(IDLE)]
    try:
        # Accepted in order: a scrape answered after them means all were accepted.
        assert b"agentq_worker_in_flight" in _scrape(url)
        added = _threads(pid) - before
        assert added <= THREADS, f"{IDLE} idle connections added {added} threads"

        # The server closes them (no whole request within header_timeout).
        for sock in idle:
            sock.settimeout(BOUND)
            start = time.monotonic()
            while sock.recv(4096):  # a 408, then the end of the stream
                assert time.monotonic() - start < BOUND
    finally:
        for sock in idle:
            sock.close()
    assert b"agentq_worker_in_flight" in _scrape(url)  # still serving
