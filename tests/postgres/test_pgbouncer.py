"""Behind PgBouncer in transaction pooling mode (``pooler=transaction``).

There a server connection is a client's only for one transaction: ``LISTEN``
hears nothing and a statement psycopg prepared on one server connection is
missing on the next. With ``pooler=transaction`` agentq neither listens (its
receivers poll every ``poll_interval``) nor prepares; the tests run a worker
process and a producer through a real PgBouncer that has fewer server
connections than they have clients.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import Runtime, TaskStatus
from agentq.backends import open_backend
from agentq.backends.postgres.config import parse_url
from agentq.backends.postgres.wakeups import LISTENER_NAME
from agentq.demo_server import DemoAPI
from agentq.errors import ConfigError, TransactionError
from tests.postgres.pgbouncer import SERVER_CONNECTIONS, server_connections

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_pooler_option_is_agentqs_and_checked() -> None:
    c = parse_url("postgresql://app:pw@bouncer:6432/shop?pooler=transaction&sslmode=require")
    assert c.transaction_pooler and "pooler" not in c.conninfo
    assert c.safe_url.endswith("?sslmode=require&pooler=transaction")
    assert not parse_url("postgresql://app@db/shop").transaction_pooler
    with pytest.raises(ConfigError, match="pooler must be one of session, transaction, not 'st"):
        parse_url("postgresql://app@db/shop?pooler=statement")


def test_a_statement_missing_on_the_server_names_the_pooler_option(postgres_url: str) -> None:
    # What psycopg's prepared statements meet behind a transaction pooler, made
    # happen on purpose: the error says what to add to the URL.
    b = open_backend(postgres_url)
    try:
        with pytest.raises(TransactionError, match="add pooler=transaction to the database URL"):
            b.transact(lambda tx: tx.execute("EXECUTE agentq_no_such_statement"))
    finally:
        b.close()


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60  # real time: a worker in another process
    while not condition():
        assert time.monotonic() < deadline, f"{what} within 60 s"
        time.sleep(0.05)


def test_a_worker_behind_pgbouncer_in_transaction_mode_polls_and_runs_everything(
    pgbouncer_url: str, postgres_url_factory: Any, api: DemoAPI
) -> None:
    url = f"{pgbouncer_url}?pooler=transaction&poll_interval=0.05"
    settings = {"payments_url": api.url, "notifications_url": api.url}
    rt = Runtime(url, tools=ROOT / "tools", policies=ROOT / "policies", settings=settings)
    env = {**os.environ, "AGENTQ_DB": url}
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "worker", "--tools", str(ROOT / "tools"),
         "--policies", str(ROOT / "policies"), "--concurrency", "4",
         *(f"--setting={k}={v}" for k, v in settings.items())],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        burst = [rt.enqueue_action("execute_refund", {"order_id": f"b{i}", "amount": 5})
                 for i in range(12)]  # fmt: skip

        def done(tasks: list[Any]) -> bool:
            return all(rt.task(t.task_id).status == TaskStatus.SUCCEEDED for t in tasks)

        _until(lambda: done(burst), "the burst's refunds succeeded")
        # Enqueued one at a time to an idle worker: each reaches it by its poll.
        for i in range(5):
            one = rt.enqueue_action("execute_refund", {"order_id": f"s{i}", "amount": 5})
            _until(lambda one=one: done([one]), f"refund s{i} succeeded")
        # An approval decided here, run there: records and queues through the pooler.
        held = rt.enqueue_action("execute_refund", {"order_id": "big", "amount": 500})
        rt.approve(held.approval_id or "", by="alice")
        _until(lambda: done([held]), "the approved refund succeeded")
        sessions = server_connections(postgres_url_factory, url)
        # Transaction pooling really was in the way: fewer server sessions than
        # the worker's and this process's pools hold, and none of them LISTENs.
        assert len(sessions) <= SERVER_CONNECTIONS
        assert all(name != LISTENER_NAME for name, _query in sessions)
        assert not any(str(query).upper().startswith("LISTEN") for _name, query in sessions)
    finally:
        worker.terminate()
        out, _ = worker.communicate(timeout=60)
        rt.close()
    assert "prepared statement" not in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    charged = sorted(b["order_id"] for b in api.applied())
    assert charged == sorted(["big", *(f"b{i}" for i in range(12)), *(f"s{i}" for i in range(5))])
