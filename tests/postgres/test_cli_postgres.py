"""``agentq init`` on PostgreSQL: ``--print-ddl`` needs neither a server nor
psycopg, the printed DDL is what ``init`` itself creates, and a server that is
not there is an ``agentq: error:`` line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ports import held_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _agentq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_print_ddl_needs_no_server_and_no_postgres_extra(tmp_path: Path) -> None:
    # A sitecustomize that makes psycopg unimportable, as without the extra.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nfor m in ('psycopg', 'psycopg_pool'):\n    sys.modules[m] = None\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "PYTHONPATH": str(tmp_path)}  # fmt: skip
    proc = _agentq("init", "--print-ddl", "--db", "postgresql://app:pw@nohost/db?schema=jobs",
                   env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('CREATE SCHEMA IF NOT EXISTS "jobs";')
    assert 'CREATE TABLE "jobs"."escalations" (' in proc.stdout


def test_the_printed_ddl_is_what_init_creates(postgres_url: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    printed = _agentq("init", "--print-ddl", "--db", postgres_url)
    assert printed.returncode == 0, printed.stderr
    conn: Any = psycopg.connect(postgres_url, autocommit=True)
    try:
        conn.execute(printed.stdout)  # several statements: the simple query protocol
    finally:
        conn.close()
    # init finds every queue there with the spec it would have created.
    proc = _agentq("init", "--db", postgres_url)
    assert proc.returncode == 0, proc.stderr
    assert "queues escalations" in proc.stdout


def test_init_without_a_server_is_one_error_line() -> None:
    with held_port() as port:
        proc = _agentq("init", "--db", f"postgresql://app:pw@127.0.0.1:{port}/db")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("agentq: error: "), proc.stderr
    assert "connection refused" in proc.stderr and "Traceback" not in proc.stderr
    assert ":pw@" not in proc.stderr
