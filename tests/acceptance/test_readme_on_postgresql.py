"""The README's refund bot runs on PostgreSQL with only its database URL changed.

The README's first Python block (its "What you get" section) is taken as
written, its ``sqlite:///agentq.db`` replaced by a fresh PostgreSQL database,
and run in a folder holding the refund bot's ``tools/`` and ``policies/``: its
SQL (SQLite's ``?`` marks), its tool's ``on_commit`` write and its asserts must
all hold there too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SQLITE_URL = '"sqlite:///agentq.db"'


def readme_refund_bot() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## What you get\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert found, "the README's 'What you get' section has no Python block"
    return found.group(1)


def test_the_readme_refund_bot_runs_on_postgresql_by_changing_only_the_url(
    tmp_path: Path, postgres_url: str
) -> None:
    code = readme_refund_bot()
    assert code.count(SQLITE_URL) == 1, "the block names its database once"
    code = code.replace(SQLITE_URL, repr(postgres_url))
    for folder in ("tools", "policies"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "[('o-17', 'refunded')]" in proc.stdout  # the tool's on_commit write, on PostgreSQL
    assert not (tmp_path / "agentq.db").exists()
