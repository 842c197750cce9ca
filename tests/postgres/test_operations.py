"""Operating agentq on PostgreSQL from the command line, as real processes.

* A role with no rights but ``CONNECT`` on its database and ``USAGE, CREATE`` on
  agentq's schema (no superuser, no ``CREATEDB``, nothing on ``public``) runs
  ``init``, ``enqueue``, a worker, ``task``, ``prune`` and ``inspect``.
* ``agentq workers`` and ``agentq inspect`` show two live workers, then one of
  them ``lost`` once it was SIGKILLed and the other noticed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq import Runtime
from agentq.demo_server import DemoAPI
from tests.postgres.server import as_role

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ["--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")]
pytestmark = pytest.mark.slow


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


def agentq(*args: str, db: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    """``agentq ARGS`` on ``db`` (by AGENTQ_DB, as a deployment would set it)."""
    env = {**os.environ, "AGENTQ_DB": db}
    proc = subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if check is not None:
        assert proc.returncode == check, f"agentq {' '.join(args)}: {proc.stderr[-3000:]}"
    return proc


def settings(api: DemoAPI) -> list[str]:
    return ["--setting", f"payments_url={api.url}", "--setting", f"notifications_url={api.url}"]


def restricted_role(factory: Any, url: str) -> str:
    """A new login role that may only connect to ``url``'s database and use and
    create in its ``agentq`` schema (made beforehand, as a DBA would)."""
    role = factory.create_role()
    database = url.rsplit("/", 1)[1]
    admin = factory.admin(url)
    try:
        for statement in (
            f'REVOKE ALL ON DATABASE "{database}" FROM PUBLIC',
            f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"',
            "REVOKE ALL ON SCHEMA public FROM PUBLIC",
            "CREATE SCHEMA agentq",
            f'GRANT USAGE, CREATE ON SCHEMA agentq TO "{role}"',
        ):
            admin.execute(statement)
        rights = admin.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, "
            "has_database_privilege(%(r)s, current_database(), 'CREATE'), "
            "has_database_privilege(%(r)s, current_database(), 'TEMP'), "
            "has_schema_privilege(%(r)s, 'public', 'CREATE') "
            "FROM pg_roles WHERE rolname = %(r)s",
            {"r": role},
        ).fetchone()
    finally:
        admin.close()
    assert rights == (False, False, False, False, False, False)
    return as_role(url, role)


def test_a_role_with_only_create_on_its_schema_runs_agentq(
    postgres_url_factory: Any, api: DemoAPI
) -> None:
    db = restricted_role(postgres_url_factory, postgres_url_factory.create())
    assert "are ready" in agentq("init", *PROJECT, db=db).stdout
    args = json.dumps({"order_id": "o-1", "amount": 30})
    enqueued = agentq("enqueue", "execute_refund", "--args", args, *PROJECT, db=db)
    task_id, status = enqueued.stdout.split()
    assert status == "queued"
    inspected = json.loads(agentq("inspect", "--json", db=db).stdout)
    [refunds] = [t for t in inspected["tools"] if t["tool"] == "execute_refund"]
    assert refunds["queued"] == 1
    assert [q["ready"] for q in inspected["queues"] if q["queue"] == "payments"] == [1]
    agentq("worker", "--once", *PROJECT, *settings(api), db=db)
    assert json.loads(agentq("task", task_id, "--json", db=db).stdout)["status"] == "succeeded"
    assert [b["order_id"] for b in api.applied()] == ["o-1"]
    pruned = json.loads(
        agentq("prune", "--older-than", "0s", "--yes", "--json", db=db).stdout
    )["pruned"]
    assert pruned["tasks"] == 1
    assert agentq("task", task_id, db=db, check=3).returncode == 3  # gone


def _workers(db: str, *flags: str) -> dict[str, dict[str, Any]]:
    listed = json.loads(agentq("workers", "--json", *flags, db=db).stdout)["workers"]
    return {w["worker_id"]: w for w in listed}


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60  # real time: other processes' heartbeats
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within 60 s"
        time.sleep(0.2)


def test_workers_and_inspect_show_live_workers_then_one_lost(
    postgres_url: str, api: DemoAPI
) -> None:
    db = postgres_url
    agentq("init", *PROJECT, db=db)
    args = json.dumps({"order_id": "o-2", "amount": 500})
    agentq("enqueue", "execute_refund", "--args", args, *PROJECT, db=db)  # awaits approval
    later = json.dumps({"order_id": "o-3", "amount": 20})
    agentq("enqueue", "execute_refund", "--args", later, "--delay", "3600", *PROJECT, db=db)
    env = {**os.environ, "AGENTQ_DB": db}

    def worker(name: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "worker", "--id", name, *PROJECT,
             *settings(api), "--heartbeat-interval", "0.3", "--heartbeat-timeout", "3"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip

    def status() -> dict[str, str]:  # read in this process while waiting
        return {w.worker_id: w.status for w in rt.workers()}

    rt = Runtime(db)
    watcher, doomed = worker("watcher"), worker("doomed")
    try:
        _until(lambda: status() == {"watcher": "live", "doomed": "live"}, "heartbeat of both")
        assert {w["status"] for w in _workers(db).values()} == {"live"}
        inspected = json.loads(agentq("inspect", "--json", db=db).stdout)
        queues = {q["queue"]: q for q in inspected["queues"]}
        assert queues["payments"]["scheduled"] == 1  # the delayed refund
        assert queues["worker_heartbeats"]["depth"] == 2  # each worker's deadline
        assert inspected["approvals"]["pending"] == 1
        assert inspected["workers"] == 2  # live ones
        doomed.kill()  # no clean stop: its heartbeat message stays, and comes due
        doomed.wait(30)
        _until(lambda: status().get("doomed") == "lost", "lost report")
        listed = _workers(db, "--all")
        assert (listed["doomed"]["status"], listed["watcher"]["status"]) == ("lost", "live")
    finally:
        for proc in (watcher, doomed):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        rt.close()
