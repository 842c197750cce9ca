"""The chaos run's parts that need no database: the SQL rewrite per dialect, the
refund tool's completion through it, and how an outage's figures become
problems. The runs themselves are ``.ci/run`` steps (``python -m tests.chaos
--backend spanner|postgresql``); the SQLite one is ``test_chaos.py``."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.tools import ToolRegistry
from tests.chaos.appsql import portable, portable_refund_tool
from tests.chaos.outages import Outage, outage_problems
from tests.chaos.workers import ROOT


@pytest.mark.parametrize(
    ("kind", "sql", "params"),
    [
        ("sqlite", "UPDATE orders SET refund_id = ? WHERE id = ?", ("r", "o")),
        ("postgresql", "UPDATE orders SET refund_id = %s WHERE id = %s", ("r", "o")),
        ("spanner", "UPDATE orders SET refund_id = @p1 WHERE id = @p2", {"p1": "r", "p2": "o"}),
    ],
)
def test_placeholders_are_rewritten_for_each_dialect(kind: str, sql: str, params: Any) -> None:
    assert portable(kind, "UPDATE orders SET refund_id = ? WHERE id = ?", ("r", "o")) == (
        sql,
        params,
    )


def test_a_statement_without_parameters_is_left_alone() -> None:
    assert portable("spanner", "SELECT id FROM orders", ()) == ("SELECT id FROM orders", ())


class _Recorder:
    """A completion's Decision that records the SQL it is given."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        self.statements.append((sql, params))
        return [("re_1",)] if sql.startswith("SELECT") else []


class _Context:
    def __init__(self) -> None:
        self.completions: list[Any] = []
        self.settings = {"orders_table": "orders"}

    def on_commit(self, fn: Any) -> None:
        self.completions.append(fn)


def test_the_refund_tools_completion_runs_in_the_backends_dialect_and_is_counted() -> None:
    loaded = ToolRegistry()
    loaded.load_dir(ROOT / "tools")
    tool = portable_refund_tool(loaded.get("execute_refund"), "postgresql")
    ctx, args = _Context(), tool.args_model.model_validate({"order_id": "o-1", "amount": 5})

    class _Http:
        def post(self, url: str, json: Any) -> Any:
            import httpx

            body = {"refund_id": "re_1", "status": "refunded"}
            return httpx.Response(200, json=body, request=httpx.Request("POST", url))

    ctx.http = _Http()  # type: ignore[attr-defined]
    ctx.settings["payments_url"] = "http://127.0.0.1:9"
    tool.handler(ctx, args)
    tx = _Recorder()
    (completion,) = ctx.completions
    completion(tx)
    update, select, insert = tx.statements
    assert update == (
        "UPDATE orders SET state = 'refunded', refund_id = %s WHERE id = %s",
        ("re_1", "o-1"),
    )
    assert select[1] == ("o-1",)
    assert insert[0].startswith("INSERT INTO refund_commits") and insert[1][0] == "o-1"


def test_an_outage_names_each_worker_and_the_server_that_did_not_come_back() -> None:
    fine = Outage("fast", 0.0, 4.0, [11, 12], {11: 0.5, 12: 1.0}, http_back=0.7)
    stuck = Outage("immediate", 10.0, 14.0, [21, 22], {21: 2.0, 22: None}, http_back=None)
    assert outage_problems([fine], http=True) == []
    problems = outage_problems([fine, stuck], http=True)
    assert any("[22]" in p and "immediate" in p for p in problems)
    assert any("agentq serve accepted no enqueue" in p for p in problems)
    assert outage_problems([Outage("fast", error="pg_ctl failed")], http=False) == [
        "restart -m fast failed: pg_ctl failed"
    ]
