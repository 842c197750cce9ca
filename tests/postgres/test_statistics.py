"""Issue 38 on PostgreSQL: a worker about to serve a backlog analyzes agentq's
tables that outgrew their planner statistics (never analyzed, or more than
doubled since), so that its batches' set statements look their rows up by key.

With no statistics PostgreSQL guesses a fixed share of the ledger per table
name, and a completion's swap of 64 records hashed them and read every record
of the ledger: all 5,000 in the benchmark's fresh database, 8 ms of server CPU
a batch (``auto_explain``). Autovacuum would analyze them only at its next
visit, a minute later by default. Here autovacuum is kept off the tables, so
only agentq's own check can give them statistics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import Runtime, ToolContext, tool  # noqa: E402
from agentq.backends.postgres import PostgresBackend  # noqa: E402
from agentq.clock import FakeClock  # noqa: E402

BACKLOG = 3000  # tasks: the records table well past the check's smallest size
SET = 64  # records one completion swaps in the benchmark


class Args(BaseModel):
    n: int


@tool(queue="stats_work")
def stats_step(ctx: ToolContext, args: Args) -> int:
    return args.n


def _rows_read(plan: Any, relation: str) -> int:
    """Rows the scans of ``relation`` read in an ``EXPLAIN (ANALYZE, FORMAT JSON)``
    plan: those they gave plus those their filters dropped."""
    if isinstance(plan, list):
        return sum(_rows_read(p, relation) for p in plan)
    if not isinstance(plan, dict):
        return 0
    own = 0
    if plan.get("Relation Name") == relation and "Scan" in plan.get("Node Type", ""):
        own = int(plan["Actual Rows"]) * int(plan.get("Actual Loops", 1)) + sum(
            int(plan.get(f"Rows Removed by {what}", 0)) for what in ("Filter", "Index Recheck")
        )
    return own + sum(_rows_read(v, relation) for v in plan.values() if isinstance(v, list | dict))


@pytest.fixture
def rt(postgres_url: str) -> Iterator[Runtime]:
    runtime = Runtime(postgres_url, tools=[stats_step], clock=FakeClock())
    assert isinstance(runtime.backend, PostgresBackend)
    try:
        yield runtime
    finally:
        runtime.close()


def _swap_of_the_newest(rt: Runtime, conn: Any) -> Any:
    """The plan of a completion's swap of the ``SET`` newest task records, run
    for real and rolled back."""
    backend = rt.backend
    assert isinstance(backend, PostgresBackend)
    stored = conn.execute(
        "SELECT k, v FROM agentq.records WHERE tbl = 'tasks' ORDER BY k DESC LIMIT %s", (SET,)
    ).fetchall()
    rows: list[tuple[str, str, str, str | None]] = [(k, v, v, None) for k, v in stored]
    query, params = backend._records._swap_sql("tasks", rows)
    with conn.transaction(force_rollback=True):
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchall()
    assert plan[0]["Plan"]["Actual Rows"] == SET  # each record swapped: the set is right
    return plan


def test_a_worker_on_a_backlog_analyzes_the_outgrown_tables_and_completions_read_their_set(
    rt: Runtime, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for table in ("records", "stats_work"):
            conn.execute(f"ALTER TABLE agentq.{table} SET (autovacuum_enabled = false)")
        for start in range(0, BACKLOG, 500):

            def enqueue(tx: Any, first: int = start) -> None:
                for i in range(first, first + 500):
                    tx.enqueue("stats_step", {"n": i})

            rt.transact(enqueue)
        before = _swap_of_the_newest(rt, conn)
        # The premise: without statistics the swap reads the whole ledger.
        assert _rows_read(before, "records") >= BACKLOG, before
        assert rt.worker(batch_size=8).drain() == BACKLOG
        backend = rt.backend
        assert isinstance(backend, PostgresBackend)
        backend._statistics.wait(30.0)
        after = _swap_of_the_newest(rt, conn)
        assert _rows_read(after, "records") <= SET, after
        [[analyzed]] = conn.execute(
            "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables "
            "WHERE schemaname = 'agentq' AND relname = 'records'"
        ).fetchall()
        assert analyzed and "agentq.records" in backend._statistics.analyzed


def test_a_check_runs_at_most_once_an_interval(rt: Runtime, postgres_url: str) -> None:
    backend = rt.backend
    assert isinstance(backend, PostgresBackend)
    keeper = backend._statistics
    keeper.check_soon()
    keeper.wait(30.0)
    first = keeper._checked_at
    keeper.check_soon()  # within the interval: no second check
    keeper.wait(30.0)
    assert keeper._checked_at == first
