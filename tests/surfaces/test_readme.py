"""The MCP and adapter guides' snippets (docs/how-to/mcp.md, adapters.md) run as
written (in a copy of the project folder, so they find tools/ and policies/ and
leave nothing behind)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.surfaces._extras import require
from tests.surfaces.conftest import ROOT

GUIDES = ("mcp.md", "adapters.md")
#: What each snippet prints, in the guides' order.
EXPECTED = ["input_required", "queued", "ops-lead", '"status": "queued"']


def snippets() -> list[str]:
    text = "".join((ROOT / "docs" / "how-to" / name).read_text() for name in GUIDES)
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_every_snippet_is_checked() -> None:
    assert len(snippets()) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_snippet_runs_as_written(tmp_path: Path, index: int) -> None:
    module, extra = [("mcp", "mcp"), ("pydantic_ai", "pydantic-ai"), ("agents", "openai-agents"),
                     ("langgraph", "langchain")][index]  # fmt: skip
    require(module, extra)
    shutil.copytree(ROOT / "tools", tmp_path / "tools")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-c", snippets()[index]],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert EXPECTED[index] in proc.stdout
