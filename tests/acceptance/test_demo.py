"""`agentq demo` end to end: a real worker process killed mid-task, real HTTP on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_demo_runs_end_to_end_and_nothing_is_charged_twice(tmp_path: Path) -> None:
    # From a folder with a project of its own, which the demo must not read.
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "mine.py").write_text('raise SystemExit("user tools loaded")\n')
    proc = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "demo", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["ok"] is True, summary["checks"]
    assert summary["charged_twice"] == 0
    assert summary["worker_crashes"] == 1
    assert summary["crashed_task_completed_once"] is True
    # The killed worker's refund was called again with the same key and not charged.
    assert summary["duplicate_charges_prevented"] >= 1
    assert summary["refund_api_calls"] > summary["refunds_executed"]
    assert summary["escalations_fired"] >= 1 and summary["escalations_cancelled"] >= 1
    assert summary["approved_after_escalation"] == 1
    succeeded = summary["tasks_by_outcome"]["execute_refund:succeeded"]
    assert succeeded == summary["refunds_executed"]
    assert summary["elapsed_seconds"] < 60


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
