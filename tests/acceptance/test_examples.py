"""Every example runs and prints what it claims.

Each example states its claims itself, as ``# expect: <line>`` comments near
its top; this test runs the example and checks every such line is printed.
Keeping the claims beside the code means adding an example touches one file.

A representative set runs on PostgreSQL too, by the URL alone (``AGENTQ_DB``):
the refund bot, over HTTP and over MCP, the application's SQL in a decision and
its rollback, a timer cancelled in a transaction, ordering keys, and a join.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
EXPECT = "# expect: "
#: The examples that run on PostgreSQL as well (each reads AGENTQ_DB).
ON_POSTGRES = [
    "refund_bot.py",
    "http_api.py",
    "mcp_server.py",
    "signup_welcome.py",
    "trial_reminder.py",
    "ordering.py",
    "ship_when_paid_and_packed.py",
    "langgraph_durable_refunds.py",
]


def expected_lines(path: Path) -> list[str]:
    return [line[len(EXPECT):].rstrip("\n") for line in path.read_text().splitlines()
            if line.startswith(EXPECT)]  # fmt: skip


def test_every_example_states_what_it_prints() -> None:
    assert EXAMPLES
    missing = [p.name for p in EXAMPLES if not expected_lines(p)]
    assert not missing, f"examples without '# expect:' lines: {missing}"


def test_every_example_is_listed_on_the_examples_page() -> None:
    page = (ROOT / "docs" / "how-to" / "examples.md").read_text()
    unlisted = [p.name for p in EXAMPLES if f"examples/{p.name}" not in page]
    assert not unlisted, f"examples docs/how-to/examples.md does not list: {unlisted}"


def run_example(path: Path, db: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTQ_DB"}
    if db is not None:
        env["AGENTQ_DB"] = db
    proc = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    missing = [line for line in expected_lines(path) if line not in proc.stdout]
    assert not missing, f"{path.name} did not print {missing}:\n{proc.stdout[-2000:]}"
    assert "worker-1 timed out" not in proc.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path) -> None:
    run_example(path, None)


@pytest.mark.parametrize("name", ON_POSTGRES)
def test_example_runs_on_postgresql_by_the_url_alone(name: str, postgres_url_factory: Any) -> None:
    url = postgres_url_factory.create()
    run_example(ROOT / "examples" / name, url)
    admin = postgres_url_factory.admin(url)
    try:  # it ran there: its tasks are in that database's ledger
        (tasks,) = admin.execute(
            "SELECT count(*) FROM agentq.records WHERE tbl = 'tasks'"
        ).fetchone()
    finally:
        admin.close()
    assert tasks > 0
