"""A stopping ``agentq serve`` (or ``agentq ui --api``) answers its parked
long-polls at once.

uvicorn waits, on SIGTERM, for every request in progress: a ``Prefer: wait``
long-poll of ``--max-wait`` seconds (60 by default, up to an hour) held the
stopping server that long, and a supervisor that gives up after its own grace
(systemd, Kubernetes: 30 s) killed it mid-answer. Now a parked long-poll is
answered at once with the task as it is (the client polls again, elsewhere),
and whatever is still running after ``[servers] shutdown_grace`` seconds is cut
off.

The real command in its own process on 127.0.0.1, a real signal; waits bounded
by ``BOUND``, far below the long-poll's 600 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.http._serving import url_told

ROOT = Path(__file__).resolve().parents[2]
BOUND = 20.0  # seconds; the parked long-poll asks for 600

pytestmark = pytest.mark.slow


#: The servers that serve the HTTP API's long-polls.
COMMANDS = {
    "serve": ["serve", "--insecure-local", "--max-wait", "600"],
    "ui --api": ["ui", "--insecure-local", "--api"],
}


def _started(folder: Path, command: list[str]) -> tuple[subprocess.Popen[str], str]:
    config = folder / "agentq.toml"
    # One wait per principal: a second long-poll answered 429 shows the first is parked.
    config.write_text(
        f'[agentq]\ndb = "sqlite:///{folder / "a.db"}"\ntools = "{ROOT / "tools"}"\n'
        f'policies = "{ROOT / "policies"}"\n\n[servers]\nmax_waits_per_principal = 1\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", *command, "--port", "0", "--config", str(config)],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        return proc, url_told(proc)
    except AssertionError:
        proc.kill()
        raise


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_sigterm_answers_a_parked_long_poll_with_the_task_as_it_is(
    tmp_path: Path, command: str
) -> None:
    proc, url = _started(tmp_path, COMMANDS[command])
    answers: list[httpx.Response | BaseException] = []
    try:
        with httpx.Client(base_url=url, timeout=BOUND) as client:
            made = client.post("/v1/tools/execute_refund/actions",
                               json={"args": {"order_id": "o1", "amount": 5}})  # fmt: skip
            assert made.status_code in (201, 202), made.text
            task_id = made.json()["task_id"]

            sending = threading.Event()

            def long_poll() -> None:
                with httpx.Client(base_url=url, timeout=BOUND) as own:
                    sending.set()
                    try:
                        answers.append(own.get(f"/v1/tasks/{task_id}",
                                               headers={"Prefer": "wait=600"}))  # fmt: skip
                    except BaseException as exc:  # reported by the assertion below
                        answers.append(exc)

            deadline = time.monotonic() + BOUND
            while True:  # park it: the probe answered 429 holds no slot
                assert time.monotonic() < deadline, "the long-poll never parked"
                answers.clear()
                sending.clear()
                poller = threading.Thread(target=long_poll)
                poller.start()
                assert sending.wait(BOUND)
                time.sleep(0.1)  # its head on the way: the probe would take the slot first
                probe = client.get(f"/v1/tasks/{task_id}", headers={"Prefer": "wait=1"})
                if probe.status_code == 429 and poller.is_alive():
                    break
                poller.join(BOUND)  # the probe took the slot first: the poll was 429
            asked = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            poller.join(BOUND + 5)
        assert answers, "the long-poll got no answer"
        answer = answers[0]
        assert isinstance(answer, httpx.Response), f"the long-poll was cut off: {answer!r}"
        assert answer.status_code == 200
        assert answer.json()["status"] == "queued"
        assert answer.headers["Preference-Applied"].startswith("wait=")
        # uvicorn raises the signal again once it stopped: the status says SIGTERM.
        assert proc.wait(BOUND) in (0, -signal.SIGTERM)
        assert time.monotonic() - asked < BOUND
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
