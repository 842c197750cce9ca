"""Wake-ups across processes on PostgreSQL: a receiver in another process wakes
on the sender's NOTIFY, well before its poll, and a listener whose connection
the server dropped reconnects and hears the next one (real time, bounded)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import Message, open_backend  # noqa: E402
from agentq.backends.postgres.wakeups import LISTENER_NAME  # noqa: E402
from agentq.clock import SystemClock  # noqa: E402
from agentq.spec import QueueSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
#: Far above any wake-up by notification, far below the receivers' poll.
POLL = 60
BOUND = 20.0


def _send_from_another_process(url: str, key: str) -> float:
    code = (
        "import sys, time; from agentq.backends import open_backend; "
        "b = open_backend(sys.argv[1]); "
        "b.transact(lambda tx: tx.send('Jobs', sys.argv[2], b'x')); "
        "print(time.time()); b.close()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, url, key], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    return float(out.stdout.strip())


def test_a_receiver_in_another_process_wakes_on_the_notify_not_its_poll(postgres_url: str) -> None:
    url = f"{postgres_url}?poll_interval={POLL}"
    backend = open_backend(url, clock=SystemClock())
    backend.create_queue(QueueSpec.simple("Jobs"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.postgres._receiver", url, "Jobs"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        sent_at = time.time()  # wall clock: compared with the other process's
        backend.transact(lambda tx: tx.send("Jobs", "ping", b"x"))
        key, received_at = json.loads(proc.stdout.readline())
        assert key == ["ping"]
        assert received_at - sent_at < BOUND  # the poll would have taken 60 s
    finally:
        try:
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        backend.close()


def _listener_pids(admin: Any, database: str) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
        (database, LISTENER_NAME),
    ).fetchall()
    return [r[0] for r in rows]


def _listening_again(admin: Any, database: str, old: int) -> bool:
    rows = admin.execute(
        "SELECT query FROM pg_stat_activity WHERE datname = %s AND application_name = %s "
        "AND pid <> %s",
        (database, LISTENER_NAME, old),
    ).fetchall()
    return any(r[0].startswith(("LISTEN", "SELECT 1")) for r in rows)


def _wait_for(predicate: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)  # a bounded poll of the server's activity view
    return False


def test_a_dropped_listener_reconnects_and_hears_the_next_send(postgres_url: str) -> None:
    url = f"{postgres_url}?poll_interval={POLL}"
    database = postgres_url.rsplit("/", 1)[1]
    backend = open_backend(url, clock=SystemClock())
    backend.create_queue(QueueSpec.simple("Jobs"))
    admin: Any = psycopg.connect(postgres_url, autocommit=True)
    got: list[Message] = []
    done = threading.Event()

    def receive() -> None:
        for batch in backend.stream("Jobs", 1, 120):
            got.extend(batch)
            break
        done.set()

    thread = threading.Thread(target=receive, daemon=True)
    try:
        thread.start()
        assert _wait_for(lambda: len(_listener_pids(admin, database)) == 1, BOUND)
        [old] = _listener_pids(admin, database)
        admin.execute("SELECT pg_terminate_backend(%s)", (old,))
        # Reconnected and listening again: a new connection whose last statement is
        # its LISTEN (or the keep-alive check that follows it).
        assert _wait_for(lambda: _listening_again(admin, database, old), BOUND), (
            "the listener did not reconnect"
        )
        sent_at = time.monotonic()
        _send_from_another_process(url, "after-drop")
        assert done.wait(BOUND), "the receiver did not wake"
        assert [m.key for m in got] == [("after-drop",)]
        assert time.monotonic() - sent_at < BOUND
    finally:
        admin.close()
        backend.close()
        thread.join(10)
