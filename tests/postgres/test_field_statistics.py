"""Issue 38 item 1 on PostgreSQL: a listing filtered on record fields kept as
JSON text (a task's status and kind) is planned from statistics on those
fields. Every task listing of the API filters on the kind (actions), and a page
of queued actions during a backlog, where every record matches, was planned as
if one row in 40,000 did: a scan and sort of the whole ledger ("Rows Removed by
Filter" none, but every row read and sorted: 270 ms at 100,000 queued tasks)
instead of a walk of the key index that stops at the page's end (0.5 ms)."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import open_backend  # noqa: E402
from tests.postgres.plans import listings_sent  # noqa: E402

TASKS = 20_000


def _nodes(plan: Any) -> list[str]:
    """The node types of an ``EXPLAIN (FORMAT JSON)`` plan."""
    if isinstance(plan, list):
        return [n for p in plan for n in _nodes(p)]
    if not isinstance(plan, dict):
        return []
    own = [str(plan["Node Type"])] if "Node Type" in plan else []
    return own + [n for v in plan.values() if isinstance(v, list | dict) for n in _nodes(v)]


@pytest.mark.parametrize("newest_first", [False, True])
def test_a_page_of_queued_actions_in_a_backlog_walks_the_key_index(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, newest_first: bool
) -> None:
    b = open_backend(postgres_url)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            # A backlog: every task queued, an action (written in SQL: quicker).
            conn.execute(
                "INSERT INTO agentq.records (tbl, k, v) SELECT 'tasks', "
                "'tsk_' || lpad(i::text, 8, '0'), %s FROM generate_series(1, %s) AS i",
                ('{"status":"queued","kind":"action","tool":"ship"}', TASKS),
            )
            conn.execute("ANALYZE agentq.records")
            sent = listings_sent(monkeypatch)
            rows = b.list_records("tasks", where={"status": ["queued"], "kind": ["action"]},
                                  limit=101, descending=newest_first)  # fmt: skip
            assert len(rows) == 101
            [(sql, params)] = sent
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
        nodes = _nodes(plan)
        assert "Sort" not in nodes, nodes  # every row read and sorted for 101 of them
        assert "Index Scan" in nodes, nodes
        read = plan[0]["Plan"]["Plans"][0]["Actual Rows"]
        assert read <= 101, read
    finally:
        b.close()
