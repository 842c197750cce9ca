"""``--insecure-local`` is local in fact (issue 27, item 5), tried as an attacker
would: real ``agentq serve`` and ``agentq ui`` processes on 127.0.0.1.

Admitting every loopback client is ambient authority, like a cookie: any web
page the developer opens could reach the server, cross-site (a form post, a
``no-cors`` fetch with no body) or by DNS rebinding (its own name resolving to
127.0.0.1, so the browser deems the server same-origin and sends the page's
Host). So the server refuses a Host that is no loopback name (421), any Origin
but its own (403), a request a browser marks cross-site (403), and in the
console an Authorization header never stands in for the session and its CSRF
token.
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from agentq import Runtime, TaskStatus

pytestmark = pytest.mark.attack

ROOT = Path(__file__).resolve().parents[2]
AGENTQ = str(Path(sys.executable).parent / "agentq")
REFUND = {"args": {"order_id": "o-1", "amount": 20.0, "reason": "damaged"}}
_DAY = timedelta(days=1)


class Process:
    """An agentq server process on a free loopback port; ``url`` is what it told."""

    def __init__(self, args: list[str], db: str, tmp_path: Path) -> None:
        self.proc = subprocess.Popen(
            [AGENTQ, *args, "--port", "0", "--db", db, "--tools", str(ROOT / "tools"),
             "--policies", str(ROOT / "policies")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        out = self.proc.stdout

        def read() -> None:
            for line in out:
                lines.put(line)
            lines.put("")

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        while True:
            line = lines.get(timeout=60)
            found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
            assert line, "the server ended before it said where it serves"
            if found:
                self.url = found[1]
                self.port = int(self.url.rsplit(":", 1)[1])
                return

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.reader.join(30)  # it read to the end of the output
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentq.db'}"


@pytest.fixture
def serve(db: str, tmp_path: Path) -> Iterator[Process]:
    server = Process(["serve", "--insecure-local"], db, tmp_path)
    yield server
    server.stop()


@pytest.fixture
def ui(db: str, tmp_path: Path) -> Iterator[Process]:
    server = Process(["ui", "--insecure-local", "--api"], db, tmp_path)
    yield server
    server.stop()


def _task(db: str) -> str:
    rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies")
    try:
        # Due tomorrow: queued while the test runs (no worker runs it anyway).
        task = rt.transact(lambda tx: tx.schedule("execute_refund", REFUND["args"],
                                                  at=tx.now + _DAY))  # fmt: skip
        return task.task_id
    finally:
        rt.close()


def _status(db: str, task_id: str) -> TaskStatus:
    rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies")
    try:
        return rt.task(task_id).status
    finally:
        rt.close()


@pytest.mark.parametrize("which", ["serve", "ui"])
def test_a_host_that_is_no_loopback_name_is_421(
    which: str, request: pytest.FixtureRequest
) -> None:
    server: Process = request.getfixturevalue(which)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.nip.io",
                     f"10.0.0.1:{server.port}", ""):  # fmt: skip
            r = http.get("/v1/tasks", headers={"Host": host})
            assert r.status_code == 421, (host, r.status_code, r.text)
        for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "localhost",
                     f"[::1]:{server.port}"):  # fmt: skip
            assert http.get("/v1/tasks", headers={"Host": host}).status_code == 200, host


@pytest.mark.parametrize("which", ["serve", "ui"])
def test_a_cross_site_post_changes_nothing(
    which: str, request: pytest.FixtureRequest, db: str
) -> None:
    server: Process = request.getfixturevalue(which)
    task_id = _task(db)
    cancel = f"/v1/tasks/{task_id}:cancel"
    own = f"http://127.0.0.1:{server.port}"
    with httpx.Client(base_url=server.url, timeout=30) as http:
        # A page elsewhere posts with no body (fetch(..., {mode: "no-cors", method: "POST"})).
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Origin": f"http://127.0.0.1:{server.port + 1}"},
                        {"Origin": f"https://127.0.0.1:{server.port}"},
                        {"Sec-Fetch-Site": "cross-site"},
                        {"Sec-Fetch-Site": "same-site"}):  # fmt: skip
            r = http.post(cancel, headers=headers)
            assert r.status_code == 403, (headers, r.status_code, r.text)
            r = http.post("/v1/tools/execute_refund/actions", json=REFUND, headers=headers)
            assert r.status_code == 403, (headers, r.status_code)
        assert _status(db, task_id) == TaskStatus.QUEUED
        # The server's own pages (and tools that send no Origin, like curl) still may.
        assert http.post(cancel, headers={"Origin": own, "Sec-Fetch-Site": "same-origin"},
                         json={"reason": "mine"}).status_code == 200  # fmt: skip
    assert _status(db, task_id) == TaskStatus.CANCELLED


def test_in_the_console_an_authorization_header_is_no_session(ui: Process, db: str) -> None:
    task_id = _task(db)
    with httpx.Client(base_url=ui.url + "/console", timeout=30) as http:
        bearer = {"Authorization": "Bearer anything"}
        # Under --insecure-local every token is "valid": it must not replace the
        # session cookie and its CSRF token (a rebinding page can set headers).
        r = http.post(f"/tasks/{task_id}/cancel", headers=bearer, data={"note": "x"})
        assert r.status_code == 401, r.text
        # A page addressed to loopback gets the console's own local session (a
        # cookie, issue 28 item 16), whatever the header says; an action still
        # needs that session's CSRF token, which a header cannot stand in for.
        page = http.get("/tasks", headers=bearer)
        assert page.status_code == 200 and "set-cookie" in page.headers
        r = http.post(f"/tasks/{task_id}/cancel", headers=bearer, data={"note": "x"})
        assert r.status_code in (401, 403), r.text
    assert _status(db, task_id) == TaskStatus.QUEUED
