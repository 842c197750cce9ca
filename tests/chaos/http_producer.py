"""``agentq serve`` taking refunds from a producer over HTTP during the chaos run.

:class:`HttpProducer` starts ``agentq serve`` (a process of its own, never
killed or restarted by the run: it must outlive the database server's restarts
by itself) with a bearer token that may enqueue and read, and a thread that
decides small refunds (no approval needed) through ``POST
/v1/tools/execute_refund/actions``: it writes the order row through the
controller's runtime, then posts with an ``Idempotency-Key`` and repeats the
post, same key, until it gets 200 or 202 (a 503 while the database is down, a
409 while a first request with that key is still being processed, a refused
connection). Every accepted call is a decided task the checks cover; the
timestamps of accepted calls tell when the server came back after a restart.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from agentq.server.auth import hash_token
from tests.chaos.checks import Decided
from tests.chaos.workers import ROOT

__all__ = ["HttpProducer"]

_TOKEN_ENV = "AGENTQ_CHAOS_PRODUCER_TOKEN"
_START_SECONDS = 60.0
_RETRY = {409, 429, 500, 502, 503, 504}


class HttpProducer:
    """The server process and the producing thread."""

    def __init__(
        self,
        db_url: str,
        workdir: Path,
        insert_order: Any,
        *,
        interval: float = 0.25,
        seed: int = 7,
        backlog: threading.Event | None = None,
    ) -> None:
        self._insert_order = insert_order  # (order_id, amount) -> None, retried by the caller
        self._interval = interval
        self._backlog = backlog or threading.Event()  # set: produce nothing meanwhile
        self._seed = seed
        token = secrets.token_urlsafe(24)
        tokens = workdir / "tokens.toml"
        tokens.write_text(
            f'[[tokens]]\nname = "chaos-producer"\nscopes = ["enqueue", "read"]\n'
            f'sha256 = "{hash_token(token)}"\n'
        )
        tokens.chmod(0o600)
        self.log_path = workdir / "serve.log"
        command = [
            sys.executable, "-m", "agentq.cli", "serve", "--db", db_url,
            "--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies"),
            "--tokens", str(tokens), "--port", "0",
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=workdir, env=os.environ | {_TOKEN_ENV: token},
            )  # fmt: skip
        self.url = self._wait_for_url()
        self._client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=90.0
        )
        self.decided: dict[str, Decided] = {}
        self.accepted_at: list[float] = []  # monotonic times of 2xx answers
        self.retried = 0  # posts repeated (503, 409, connection refused, ...)
        self.errors: list[str] = []  # answers that are no retry and no success
        self._stop = threading.Event()  # no new calls
        self._abandon = threading.Event()  # not even an answer to the call under way
        self._thread = threading.Thread(target=self._run, name="chaos-http-producer")

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + _START_SECONDS
        marker = "serving on "
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if marker in text:
                return text.split(marker, 1)[1].split()[0]
            if self.proc.poll() is not None:
                raise RuntimeError(f"agentq serve exited ({self.proc.returncode}): {text[-2000:]}")
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(f"agentq serve did not start in {_START_SECONDS:g} s")

    def start(self) -> HttpProducer:
        self._thread.start()
        return self

    def _post(self, order: str, amount: float) -> dict[str, Any] | None:
        body = {"args": {"order_id": order, "amount": amount, "reason": "chaos over http"}}
        headers = {"Idempotency-Key": f"chaos-http-{order}"}
        while not self._abandon.is_set():
            try:
                r = self._client.post("/v1/tools/execute_refund/actions", json=body,
                                      headers=headers)  # fmt: skip
            except httpx.TransportError:
                self.retried += 1
                self._abandon.wait(0.5)
                continue
            if r.status_code in (200, 202):
                self.accepted_at.append(time.monotonic())
                return dict(r.json())
            if r.status_code in _RETRY:
                self.retried += 1
                self._abandon.wait(0.5)
                continue
            self.errors.append(f"{order}: HTTP {r.status_code}: {r.text[:300]}")
            return None
        self.errors.append(f"{order}: abandoned without an answer")
        return None

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self._interval):
            if self._backlog.is_set():
                continue
            order = f"http-{self._seed}-{n:05}"
            n += 1
            amount = float(5 + n % 90)
            try:
                self._insert_order(order, amount)
            except Exception as exc:  # a finding; the producer goes on
                self.errors.append(f"{order}: writing the order failed: {exc!r}")
                continue
            task = self._post(order, amount)
            if task is not None:
                self.decided[task["task_id"]] = Decided(task["task_id"], order, amount)

    @property
    def alive(self) -> bool:
        """The server process is still the one started (it never exited)."""
        return self.proc.poll() is None

    def stop(self, timeout: float = 120.0) -> None:
        """Make no new calls; wait (bounded) for the answer to the one under way."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def close(self) -> None:
        self._abandon.set()
        self.stop()
        self._client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
