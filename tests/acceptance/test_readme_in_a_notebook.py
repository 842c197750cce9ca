"""The testing guide's "In a notebook" snippet (docs/how-to/testing.md) runs as
written (outside a notebook too)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section_snippet() -> str:
    readme = (ROOT / "docs" / "how-to" / "testing.md").read_text()
    section = readme.split("\n## In a notebook\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_in_a_notebook_snippet_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(_section_snippet())
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env={"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "handled 2 task(s) in 1 clock jump(s)" in proc.stdout
