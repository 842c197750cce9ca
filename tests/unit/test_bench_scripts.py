"""The benchmark scripts under tests/bench still start.

They are run by hand (they measure, so they are no tests), which let one of
them break unnoticed when ``agentq.bench`` became a package: each must at
least import and print its usage.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_there_are_bench_scripts() -> None:
    assert {p.name for p in SCRIPTS} >= {"compare_huey.py", "write_path.py", "storage_curve.py"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_bench_script_prints_its_usage(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True, text=True, timeout=120, cwd=BENCH.parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_the_storage_curve_reports_whether_its_producer_kept_up(tmp_path: Path) -> None:
    # With a 0.5 s producer sleep both pipelines ran at the producer's rate, which
    # made "pruning costs nothing" true by construction; the run now says so.
    out = tmp_path / "curve.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "storage_curve.py"), "--tasks", "1500", "--backlog", "100",
         "--sample-every", "500", "--modes", "on", "--retention", "1h", "--dir", str(tmp_path),
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=BENCH.parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(out.read_text())["runs"]["prune-on"]
    assert isinstance(run["producer_ran_dry"], int)
    assert run["tasks_per_s"] > 0
    final = run["samples"][-1]
    assert final["processed"] == 1500
    assert final["task_records"] == 1500  # an hour's retention prunes none of them
