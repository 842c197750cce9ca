"""Every example runs and prints what it claims.

Each example states its claims itself, as ``# expect: <line>`` comments near
its top; this test runs the example and checks every such line is printed.
Keeping the claims beside the code means adding an example touches one file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
EXPECT = "# expect: "


def expected_lines(path: Path) -> list[str]:
    return [line[len(EXPECT):].rstrip("\n") for line in path.read_text().splitlines()
            if line.startswith(EXPECT)]  # fmt: skip


def test_every_example_states_what_it_prints() -> None:
    assert EXAMPLES
    missing = [p.name for p in EXAMPLES if not expected_lines(p)]
    assert not missing, f"examples without '# expect:' lines: {missing}"


def test_every_example_is_listed_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlisted = [p.name for p in EXAMPLES if f"examples/{p.name}" not in readme]
    assert not unlisted, f"examples the README does not list: {unlisted}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    missing = [line for line in expected_lines(path) if line not in proc.stdout]
    assert not missing, f"{path.name} did not print {missing}:\n{proc.stdout[-2000:]}"
    assert "worker-1 timed out" not in proc.stdout
