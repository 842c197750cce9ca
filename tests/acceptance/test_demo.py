"""`agentq demo` end to end: a real worker process killed mid-task, real HTTP on loopback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _agentq(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_demo_runs_end_to_end_and_nothing_is_charged_twice(tmp_path: Path) -> None:
    # In a project `agentq new` made, whose tools the demo must not load: it runs its
    # own refund bot, and --keep leaves its database where this folder's commands look.
    made = _agentq("new", "bot", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "bot"
    (project / "tools" / "mine.py").write_text('raise SystemExit("user tools loaded")\n')
    proc = _agentq("demo", "--json", "--keep", cwd=project, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["ok"] is True, summary["checks"]
    assert summary["charged_twice"] == 0
    assert summary["worker_crashes"] == 1
    assert summary["crashed_task_completed_once"] is True
    # The killed worker's refund was called again with the same key and not charged.
    assert summary["duplicate_charges_prevented"] >= 1
    assert summary["escalations_fired"] >= 1 and summary["escalations_cancelled"] >= 1
    assert summary["approved_after_escalation"] == 1
    succeeded = summary["tasks_by_outcome"]["execute_refund:succeeded"]
    assert succeeded == summary["refunds_executed"]
    assert summary["elapsed_seconds"] < 60
    # Every call to the payments API is accounted for, the scripted 503 included.
    assert summary["refund_api_outages"] == 1
    assert summary["refund_api_calls"] == (
        summary["refunds_executed"] + summary["duplicate_charges_prevented"]
        + summary["refund_api_outages"] + summary["refund_api_refused"]
    )  # fmt: skip
    assert summary["checks"]["every refund API call accounted for"] is True
    # While the killed worker's task waits, the demo says what for.
    crashed = re.search(r"its task (tsk_\w+) stays leased to the dead worker", proc.stderr)
    assert crashed, proc.stderr
    assert "until the lease runs out" in proc.stderr
    # --keep: the database stays, and the lines to look at it work from the folder.
    assert (project / "agentq.db").is_file()
    assert "agentq ui --insecure-local" in proc.stderr
    listed = _agentq("tasks", "--json", "--limit", "1000", cwd=project)
    assert listed.returncode == 0, listed.stderr
    ids = {t["task_id"] for t in json.loads(listed.stdout)["tasks"]}
    assert crashed.group(1) in ids
    # A second --keep never writes into the kept (or any existing) database.
    again = _agentq("demo", "--keep", "--no-crash", "--requests", "1", cwd=project)
    assert again.returncode == 2
    assert "agentq.db exists" in again.stderr and "Traceback" not in again.stderr


def test_demo_reports_a_missing_tools_folder_clearly(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "demo", "--tools", str(tmp_path / "nope")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot find the tools/ folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_on_a_database_that_has_tasks_refuses_to_start(postgres_url: str) -> None:
    from agentq import Runtime

    # An earlier demo's state, in the schema a demo on this database uses.
    with Runtime(f"{postgres_url}?schema=agentq_demo", tools=ROOT / "tools") as rt:
        rt.enqueue_action("execute_refund", {"order_id": "o-1", "amount": 5})
    proc = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "demo", "--keep", "--db", postgres_url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("agentq: error: agentq demo needs a database without tasks")
    assert "schema=agentq_demo" in proc.stderr and "Traceback" not in proc.stderr


def test_demo_keep_in_a_folder_without_agentq_toml(tmp_path: Path) -> None:
    """Issue 39, item 2.10: the default ``sqlite:///agentq.db`` stayed relative and
    the killed worker, running in the demo's temporary folder, opened another file:
    after 30 s, a traceback (``worker process did not pick up the task``)."""
    proc = _agentq("demo", "--keep", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and (tmp_path / "agentq.db").is_file()
    assert f"kept the demo's database: {tmp_path / 'agentq.db'}" in proc.stdout
    # Issue 39, 2.12: the SIGKILLed worker's heartbeat stayed, a "silent" worker in
    # the kept database that the user's first worker then reported lost.
    workers = _agentq("workers", "--all", "--json", cwd=tmp_path)
    assert workers.returncode == 0, workers.stderr
    assert json.loads(workers.stdout)["workers"] == []


def test_a_demo_whose_worker_never_takes_its_task_ends_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bounded wait, then one clear line (and where the half-run database is)."""
    import agentq.demo
    from agentq.cli import main

    monkeypatch.setattr(agentq.demo, "WORKER_START_SECONDS", 0.5)
    monkeypatch.setattr(agentq.demo.sys, "executable", "/bin/false")  # a worker that dies
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--keep", "--requests", "2"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "agentq: error: the demo's worker process did not take its task within 0.5 s" in err
    assert f"the kept database {tmp_path / 'agentq.db'} holds a half-run demo" in err
    assert len(err.strip().splitlines()) == 2, err
