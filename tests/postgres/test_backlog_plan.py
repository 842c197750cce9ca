"""Issue 38 item 1 on PostgreSQL: the per-tool figures count the tasks whose
messages no worker leased by joining the task queue to the records
(``Backend.undelivered_backlog``). The join is left to the planner, with the
tables' statistics: a queue of a few messages beside a large ledger must look
its records up by key, never scan the ledger (SQLite, which plans without
statistics, chose the scan, so there the join's order is fixed)."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import BacklogGroup, Transaction, open_backend  # noqa: E402
from agentq.envelope import task_queue_spec  # noqa: E402
from tests.postgres.plans import listings_sent  # noqa: E402

FINISHED = 20_000


def _scans(plan: Any) -> list[tuple[str, str]]:
    """(node type, relation) of every node of an ``EXPLAIN (FORMAT JSON)`` plan
    that reads a relation."""
    if isinstance(plan, list):
        return [s for p in plan for s in _scans(p)]
    if not isinstance(plan, dict):
        return []
    own = [(str(plan["Node Type"]), str(plan["Relation Name"]))] if "Relation Name" in plan else []
    return own + [s for v in plan.values() if isinstance(v, list | dict) for s in _scans(v)]


def test_a_small_backlog_beside_a_large_ledger_looks_its_records_up_by_key(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = open_backend(postgres_url)
    try:
        spec = task_queue_spec("orders")
        b.create_queue(spec)

        def backlog(tx: Transaction) -> None:
            for n in range(10):
                tx.put_record("tasks", f"tsk_q{n:02d}", {
                    "tool": "ship", "status": "queued", "created_at": f"2026-01-01T00:00:{n:02d}"})
                tx.send(spec.name, (f"tsk_q{n:02d}", 1), {})

        b.transact(backlog)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(  # the finished ledger (written in SQL: quicker)
                "INSERT INTO agentq.records (tbl, k, v, tool) SELECT 'tasks', "
                "'tsk_' || lpad(i::text, 8, '0'), %s, 'ship' FROM generate_series(1, %s) AS i",
                ('{"status":"succeeded","tool":"ship"}', FINISHED),
            )
            conn.execute("ANALYZE")
            sent = listings_sent(monkeypatch, "SELECT r.tool")
            assert b.undelivered_backlog(spec.name) == [
                BacklogGroup("ship", 10, "2026-01-01T00:00:00")]  # fmt: skip
            [(sql, params)] = sent
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
        scans = _scans(plan)
        assert ("Seq Scan", "records") not in scans, scans  # the ledger read
        assert any(r == "records" for _, r in scans), scans
    finally:
        b.close()
