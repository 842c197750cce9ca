"""A backend URL whose driver is not installed names the extra to install (the
driver is imported only when such a URL is opened)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://app@db/shop",
         "the PostgreSQL backend (psycopg 3 and psycopg-pool) needs the 'postgres' extra"),
        ("spanner://projects/p/instances/i/databases/d",
         "the Spanner backend (google-cloud-spanner) needs the 'spanner' extra"),
    ],
)  # fmt: skip
def test_a_missing_driver_names_its_extra(tmp_path: Path, url: str, message: str) -> None:
    # A sitecustomize that makes the drivers unimportable, as without the extras.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nfor m in ('psycopg', 'psycopg_pool', 'google.cloud.spanner'):\n"
        "    sys.modules[m] = None\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    code = (
        "from agentq.backends import open_backend\nfrom agentq.errors import MissingExtra\n"
        f"try:\n    open_backend({url!r})\nexcept MissingExtra as exc:\n    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(message), proc.stdout
