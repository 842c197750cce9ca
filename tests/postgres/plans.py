"""What a listing's query costs on PostgreSQL: the listings' queries as sent
(a spy on ``psycopg.Connection.execute``), and each one explained with ANALYZE
for the rows its plan read and dropped and the index it walked. Shared by the
tests of the indexes of issue 38 item 1 (rare statuses, owners, tools)."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")


def removed(plan: Any) -> int:
    """Rows read and dropped by every node of an ``EXPLAIN (FORMAT JSON)`` plan."""
    if isinstance(plan, list):
        return sum(removed(p) for p in plan)
    if not isinstance(plan, dict):
        return 0
    own = sum(int(plan.get(f"Rows Removed by {what}", 0)) for what in ("Filter", "Index Recheck"))
    return own + sum(removed(v) for v in plan.values() if isinstance(v, list | dict))


def listings_sent(
    monkeypatch: pytest.MonkeyPatch, start: str = "SELECT k, v"
) -> list[tuple[str, Any]]:
    """The listings' queries (those that ``start`` so: ``SELECT k, v ...``) and
    parameters, as sent from now on (to explain them afterwards)."""
    sent: list[tuple[str, Any]] = []
    execute = psycopg.Connection.execute

    def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if isinstance(query, str) and query.lstrip().startswith(start):
            sent.append((query, params))
        return execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", spy)
    return sent


def check_one_plan(conn: Any, sent: list[tuple[str, Any]], index: str, what: Any) -> None:
    """The one listing query in ``sent`` (then cleared), explained on ``conn``,
    read no row it dropped and walked ``index``; ``what`` names the case."""
    [(sql, params)] = sent
    sent.clear()
    [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
    assert removed(plan) == 0, (what, sql, plan)
    assert f'"{index}"' in str(plan).replace("'", '"'), (what, plan)
