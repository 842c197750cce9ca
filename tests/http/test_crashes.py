"""Processes killed at the worst moments, through the HTTP path (real processes,
a real SQLite file, loopback servers; bounded real-time waits)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentq.demo_server import DemoAPI
from tests.http.conftest import ROOT, WEBHOOK_SECRET, LiveServer, WebhookReceiver, write_tokens

pytestmark = pytest.mark.slow

#: The lease of these tests' databases (tests/acceptance/_crash.py says why 3 s):
#: a killed process's task or webhook is redelivered 3 s after its last renewal,
#: not 10 s; every process of a test opens the same URL, so they lease alike.
CRASH_LEASE = 3


@pytest.fixture
def db_url(db_url: str) -> str:
    """The conftest's database (SQLite, PostgreSQL), with :data:`CRASH_LEASE` s leases."""
    return db_url + ("&" if "?" in db_url else "?") + f"lease_seconds={CRASH_LEASE}"


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _final(http: httpx.Client, task_id: str, timeout: float = 90) -> dict[str, Any]:
    """Long-poll the task over HTTP until it is final (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task: dict[str, Any] = http.get(f"/v1/tasks/{task_id}",
                                        headers={"Prefer": "wait=10"}).json()  # fmt: skip
        if task["status"] in ("succeeded", "dead", "cancelled"):
            return task
    raise AssertionError(f"task {task_id} not final after {timeout:g} s")


def test_a_worker_killed_after_the_payments_call_charges_once(
    server: LiveServer, api: DemoAPI, spawn_worker: Any
) -> None:
    """The payments API applies the charge and holds its answer; the worker is
    SIGKILLed then. Another worker redelivers with the same Idempotency-Key: the
    API answers from its idempotency store, and the task succeeds, charged once."""
    received, release = api.stall_after_applying("o-kill")
    victim = spawn_worker()
    with server.client() as http:
        r = http.post("/v1/tools/execute_refund/actions",
                      json={"args": {"order_id": "o-kill", "amount": 42}},
                      headers={"Idempotency-Key": "refund-o-kill"})  # fmt: skip
        assert r.status_code == 202
        task_id = r.json()["task_id"]
        assert received.wait(60), "the worker never called the payments API"
        victim.send_signal(signal.SIGKILL)
        victim.wait(20)
        release.set()
        spawn_worker()
        task = _final(http, task_id)
    assert task["status"] == "succeeded", task
    assert api.charges_per_key() == {task_id: 1}
    assert api.replays() >= 1  # the redelivery was answered, not charged again
    assert task["deliveries"] >= 2


# -- the completion webhook ---------------------------------------------------------


def _serve(
    db_url: str, api: DemoAPI, policies: Path, tokens: Path, port: int, log: Path
) -> subprocess.Popen[str]:
    """``agentq serve --worker 2``: the API and a worker in one process."""
    env = {**os.environ, "AGENTQ_WEBHOOK_SECRET": WEBHOOK_SECRET}
    with log.open("a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "serve", "--db", db_url,
             "--tools", str(ROOT / "tools"), "--policies", str(policies), "--tokens", str(tokens),
             "--port", str(port), "--worker", "2", "--setting", f"payments_url={api.url}"],
            cwd=ROOT, env=env, text=True, stdout=out, stderr=out,
        )  # fmt: skip

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"agentq serve exited: {log.read_text()[-2000:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/tasks", timeout=1)
            return True
        except httpx.TransportError:
            return False

    _wait_for(up, 60, "agentq serve to listen")
    return proc


def _one_webhook_succeeded(db_url: str, port: int) -> None:
    """The webhook task is the runtime's own: no API token reads it (issue 27), so
    the database is asked; the API does not list it."""
    from agentq import Runtime

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                      headers={"Authorization": "Bearer admin-token"}) as http:
        assert http.get("/v1/tasks", params={"tool": "agentq_webhook"}).json()["tasks"] == []
    with Runtime(db_url) as rt:
        hooks = rt.tasks(tool="agentq_webhook")
        assert len(hooks) == 1
        assert rt.wait(hooks[0].task_id, 30).status == "succeeded"


def test_a_server_killed_between_the_completion_commit_and_the_webhook_delivers_once(
    db_url: str,
    api: DemoAPI,
    policies_dir: Path,
    tmp_path: Path,
    receiver: WebhookReceiver,
    server_port: int,
) -> None:
    """The task's outcome commits with its webhook task; the receiver is down
    (503), so the webhook is still pending when the server (API and worker in
    one process) is SIGKILLed. A restarted server delivers it: once, signed,
    with Idempotency-Key <task_id>:succeeded."""
    tokens = write_tokens(tmp_path / "tokens.toml")
    port = server_port  # held for the test: the restart listens on it again
    log = tmp_path / "serve.log"
    first = _serve(db_url, api, policies_dir, tokens, port, log)
    second = None
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                          headers={"Authorization": "Bearer agent-token"}) as http:
            r = http.post("/v1/tools/execute_refund/actions", json={
                "args": {"order_id": "o-hook", "amount": 7}, "callback_url": receiver.url})
            assert r.status_code == 202, r.text
            task_id = r.json()["task_id"]
            assert _final(http, task_id)["status"] == "succeeded"
        _wait_for(lambda: receiver.attempts, 60, "the first webhook attempt")
        first.send_signal(signal.SIGKILL)
        first.wait(20)
        assert receiver.applied == {}  # killed before any webhook was delivered
        receiver.down = False
        second = _serve(db_url, api, policies_dir, tokens, port, log)
        key = f"{task_id}:succeeded"
        _wait_for(lambda: key in receiver.applied, 90, "the webhook after the restart")
        _one_webhook_succeeded(db_url, port)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    assert set(receiver.applied) == {key}
    assert set(receiver.attempts) == {key}  # every attempt carried the same key
    assert receiver.bad_signatures == 0
    body = receiver.applied[key]
    assert body["type"] == "task.succeeded" and body["task"]["task_id"] == task_id
    assert body["task"]["result"]["amount"] == 7
    assert api.charges_per_key() == {task_id: 1}


def test_a_server_killed_while_delivering_the_webhook_delivers_it_once(
    db_url: str,
    api: DemoAPI,
    policies_dir: Path,
    tmp_path: Path,
    receiver: WebhookReceiver,
    server_port: int,
) -> None:
    """The receiver applies the webhook and the server is SIGKILLed before the
    answer, so the delivery is not recorded. After a restart it is delivered
    again with the same Idempotency-Key, which the receiver applies only once."""
    tokens = write_tokens(tmp_path / "tokens.toml")
    port = server_port  # held for the test: the restart listens on it again
    log = tmp_path / "serve.log"
    first = _serve(db_url, api, policies_dir, tokens, port, log)
    second = None
    killed = threading.Event()

    def kill_the_server() -> None:
        if not killed.is_set():
            killed.set()
            first.send_signal(signal.SIGKILL)

    receiver.down = False
    receiver.on_applied = kill_the_server
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                          headers={"Authorization": "Bearer agent-token"}) as http:
            r = http.post("/v1/tools/execute_refund/actions", json={
                "args": {"order_id": "o-hook2", "amount": 9}, "callback_url": receiver.url})
            task_id = r.json()["task_id"]
        assert killed.wait(60), "no webhook arrived"
        first.wait(20)
        key = f"{task_id}:succeeded"
        second = _serve(db_url, api, policies_dir, tokens, port, log)
        _wait_for(lambda: receiver.attempts.count(key) >= 2, 90, "the webhook's redelivery")
        _one_webhook_succeeded(db_url, port)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    assert set(receiver.applied) == {key}  # applied once, though delivered twice
    assert set(receiver.attempts) == {key} and receiver.bad_signatures == 0
