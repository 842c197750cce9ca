"""The benchmark scripts under tests/bench still start.

They are run by hand (they measure, so they are no tests), which let one of
them break unnoticed when ``agentq.bench`` became a package: each must at
least import and print its usage.
"""

from __future__ import annotations

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
