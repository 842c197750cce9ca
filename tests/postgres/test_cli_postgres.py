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

from agentq.cli import main
from tests.ports import held_port
from tests.postgres.server import DatabaseFactory

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


#: agentq's schema as the catalog sees it: tables, columns (type, nullability,
#: default), indexes (their definitions), constraints.
_CATALOG = """
SELECT 'table', c.relname, array_to_string(c.reloptions, ',') FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s AND c.relkind = 'r'
UNION ALL
SELECT 'column', table_name || '.' || column_name,
       concat_ws(' ', data_type, is_nullable, collation_name, column_default)
  FROM information_schema.columns WHERE table_schema = %(s)s
UNION ALL
SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s
UNION ALL
SELECT 'constraint', conrelid::regclass::text || '.' || conname, pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = to_regnamespace(%(s)s)
ORDER BY 1, 2
"""


def _catalog(psycopg: Any, url: str, schema: str) -> list[tuple[str, ...]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(_CATALOG, {"s": schema}).fetchall()
    # The catalog names the database in nothing above; the schema in index definitions.
    return [tuple(str(v) for v in row) for row in rows]


def test_the_printed_ddl_is_what_init_creates(
    postgres_url_factory: DatabaseFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39, 2.9: the printed DDL lacked the webhook delivery queue that init
    creates. Applied by hand to one fresh database, it must make exactly the
    catalog that ``agentq init`` makes in another."""
    psycopg = pytest.importorskip("psycopg")
    by_hand, by_init = postgres_url_factory.create(), postgres_url_factory.create()
    tools = str(ROOT / "tools")
    assert main(["init", "--print-ddl", "--db", by_hand, "--tools", tools]) == 0
    printed = capsys.readouterr().out
    with psycopg.connect(by_hand, autocommit=True) as conn:
        conn.execute(printed)  # several statements: the simple query protocol
    assert main(["init", "--db", by_init, "--tools", tools]) == 0
    made = _catalog(psycopg, by_init, "agentq")
    assert any(row[:2] == ("table", "webhooks") for row in made)
    assert _catalog(psycopg, by_hand, "agentq") == made
    # And init finds every queue there with the spec it would have created.
    assert main(["init", "--db", by_hand, "--tools", tools]) == 0
    assert "webhooks" in capsys.readouterr().out


def test_init_without_a_server_is_one_error_line() -> None:
    with held_port() as port:
        proc = _agentq("init", "--db", f"postgresql://app:pw@127.0.0.1:{port}/db")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("agentq: error: "), proc.stderr
    assert "connection refused" in proc.stderr and "Traceback" not in proc.stderr
    assert ":pw@" not in proc.stderr
