"""Another role in the same PostgreSQL database (issue 40, items 7-10): a role
that may only read, a second tenant listening on agentq's channel or flooding
it, holding agentq's advisory lock, or owning the schema agentq would use.
See docs/security.md, "The tenant boundary on PostgreSQL"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import Runtime, ToolContext, tool
from tests.postgres.server import DatabaseFactory, as_role

ROOT = Path(__file__).resolve().parents[2]


class Args(BaseModel):
    n: int


@tool(queue="work")
def job(ctx: ToolContext, args: Args) -> None:
    pass


def _agentq(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTQ_DB": db}
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _grant(factory: DatabaseFactory, url: str, *statements: str) -> None:
    admin: Any = factory.admin(url)
    try:
        for statement in statements:
            admin.execute(statement)
    finally:
        admin.close()


def test_a_select_only_role_lists_tasks_and_a_write_is_one_clear_line(
    postgres_url_factory: DatabaseFactory,
) -> None:
    url = postgres_url_factory.create()
    rt = Runtime(url, tools=[job])
    try:
        task = rt.enqueue_action("job", {"n": 1})
    finally:
        rt.close()
    reader = postgres_url_factory.create_role()
    _grant(
        postgres_url_factory, url,
        f'GRANT USAGE ON SCHEMA agentq TO "{reader}"',
        f'GRANT SELECT ON ALL TABLES IN SCHEMA agentq TO "{reader}"',
    )  # fmt: skip
    db = as_role(url, reader)
    listed = _agentq(db, "tasks", "--json")
    assert listed.returncode == 0, listed.stderr
    assert task.task_id in listed.stdout
    shown = _agentq(db, "task", task.task_id, "--json")
    assert shown.returncode == 0, shown.stderr
    cancelled = _agentq(db, "cancel", task.task_id)
    assert cancelled.returncode != 0
    [line] = cancelled.stderr.strip().splitlines()
    assert line.startswith("agentq: error:") and "permission denied" in line, line
    assert "may only read" in line, line
