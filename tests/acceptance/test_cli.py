"""The CLI: worker as a real process with SIGTERM, inspect, tasks, dlq list/replay."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentq import Runtime, TaskStatus
from agentq.demo_server import DemoAPI

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def agentq(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_worker_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    with DemoAPI() as api:
        rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies")
        ids = [rt.enqueue_action("execute_refund", {"order_id": f"c{i}", "amount": 5}).task_id
               for i in range(20)]  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "worker", "--db", db, "--setting",
             f"payments_url={api.url}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if all(rt.task(i).status == TaskStatus.SUCCEEDED for i in ids):
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        assert "stopped" in out
        assert all(rt.task(i).status == TaskStatus.SUCCEEDED for i in ids)
        assert len(api.applied()) == 20
        rt.close()


def test_inspect_tasks_and_dead_letter_replay(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                 settings={"payments_url": "http://not-allowed.example"})  # fmt: skip
    task = rt.enqueue_action("execute_refund", {"order_id": "x", "amount": 5})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    rt.close()

    inspect = agentq("inspect", "--db", db, "--json")
    assert inspect.returncode == 0, inspect.stderr
    report = json.loads(inspect.stdout)
    assert report["dead_letters"] == 1
    assert {q["queue"] for q in report["queues"]} >= {"payments", "escalations"}

    listed = agentq("dlq", "list", "--db", db)
    assert json.loads(listed.stdout.splitlines()[0])["task_id"] == task.task_id

    with DemoAPI() as api:
        replay = agentq("dlq", "replay", task.task_id, "--db", db)
        assert f"replayed {task.task_id} as attempt 2" in replay.stdout
        rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                     settings={"payments_url": api.url})  # fmt: skip
        rt.worker().drain()
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
        rt.close()

    tasks = agentq("tasks", "--db", db, "--status", "succeeded")
    assert task.task_id in tasks.stdout


def test_dlq_replay_and_delete_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/d.db"
    rt = Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies",
                 settings={"payments_url": "http://not-allowed.example"})  # fmt: skip
    dead = rt.enqueue_action("execute_refund", {"order_id": "x", "amount": 5})
    rt.worker().drain()
    rt.backend.transact(lambda tx: tx.send("payments", (dead.task_id, 9), "stray row"))
    rt.worker().drain()
    entries = {e["task_id"]: e for e in rt.dead_letters()}
    assert len(entries) == 2
    stray = next(i for i, e in entries.items() if e["stray"])
    rt.close()

    bare = agentq("dlq", "replay", "--db", db)
    assert bare.returncode == 2 and "name entry ids or give --all" in bare.stderr
    everything = agentq("dlq", "replay", "--all", "--db", db)
    assert everything.returncode == 1, everything.stderr
    assert f"replayed {dead.task_id}" in everything.stdout
    assert f"skipped {stray}: " in everything.stderr and "Traceback" not in everything.stderr
    assert "1 replayed, 1 skipped" in everything.stdout
    again = agentq("dlq", "replay", dead.task_id, "--db", db)  # now queued, not dead
    assert again.returncode == 1 and "is queued: replay is not allowed" in again.stderr

    unconfirmed = agentq("dlq", "delete", "--all", "--db", db)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    deleted = agentq("dlq", "delete", stray, "nope", "--db", db)
    assert deleted.returncode == 1 and "1 deleted" in deleted.stdout
    assert "no dead-letter entry nope" in deleted.stderr
    assert agentq("dlq", "list", "--db", db).stdout == ""


def test_bad_database_url_is_a_clear_error() -> None:
    proc = agentq("inspect", "--db", "postgres://nope")
    assert proc.returncode == 2
    assert "unknown database URL scheme 'postgres'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_init_prints_spanner_ddl_for_both_dialects() -> None:
    pytest.importorskip("google.cloud.spanner")
    base = "spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:1"
    gsql = agentq("init", "--db", base, "--print-ddl")
    assert gsql.returncode == 0, gsql.stderr
    expected = (
        "CREATE QUEUE IF NOT EXISTS payments (task_id STRING(MAX) NOT NULL, "
        "attempt INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (task_id, attempt);"
    )
    assert expected in gsql.stdout
    pg = agentq("init", "--db", base + "&dialect=postgresql", "--print-ddl")
    assert "CREATE QUEUE IF NOT EXISTS payments (task_id varchar NOT NULL" in pg.stdout


def test_agentq_toml_supplies_defaults_and_bad_files_are_clear(tmp_path: Path) -> None:
    (tmp_path / "agentq.toml").write_text(
        f'[agentq]\ndb = "sqlite:///{tmp_path}/c.db"\ntools = "{ROOT / "tools"}"\n'
        f'policies = "{ROOT / "policies"}"\n\n[settings]\npayments_url = "http://127.0.0.1:9"\n'
    )
    init = agentq("init", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    assert f"sqlite:///{tmp_path}/c.db: queues" in init.stdout
    (tmp_path / "agentq.toml").write_text("[agentq]\ndatabase = 'x'\n")
    bad = agentq("init", cwd=tmp_path)
    assert bad.returncode == 2
    assert "agentq.database" in bad.stderr and "Extra inputs are not permitted" in bad.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["worker", "--concurrency", "0"], "--concurrency: must be at least 1"),
        (["bench", "--tasks", "0"], "--tasks: must be at least 1"),
        (["bench", "--payload-bytes", "-1"], "--payload-bytes: must not be negative"),
    ],
)
def test_bad_numbers_are_clear_errors(args: list[str], message: str) -> None:
    proc = agentq(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
