"""Issue 38 item 1 on SQLite: a task listing filtered on a tool (``GET
/v1/tasks?tool=refund``, the console's tool filter, ``agentq tasks --tool``)
reads the tool's page through the index of the ``tool`` column
(``agentq.backends.tool_column``), not the whole ledger. Before, the filter
was checked in each record's JSON: a tool with no task cost a read of every
task (84-90 ms at 100,000 finished tasks), which these tests saw on the code
before (the work grew with the other tools' tasks).

Each listing runs at two sizes of the ledger (the same refunds beside 100 and
2,000 shipments), and the work SQLite does for it (its virtual machine's
steps, which count the rows a query reads and drops) must not grow."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Backend, encode_record, open_backend
from tests.record_counter import SQLiteSteps

NOISE_SMALL, NOISE_LARGE = 100, 2000


def _ledger(b: Backend, noise: int) -> None:
    """60 refunds (the oldest), then ``noise`` shipments, then one newer refund:
    the tool asked for sits at both ends of the key order."""
    b.transact(lambda tx: [
        tx.put_record("tasks", f"t{i:06d}", encode_record(
            {"status": "succeeded", "tool": "refund", "kind": "action", "created_by": "ann"}))
        for i in range(60)
    ] + [
        tx.put_record("tasks", f"t{i:06d}", encode_record(
            {"status": "dead" if i % 2 else "succeeded", "tool": "ship", "kind": "action",
             "created_by": "bob"}))
        for i in range(60, 60 + noise)
    ] + [tx.put_record("tasks", "t999999", {"status": "succeeded", "tool": "refund",
                                            "created_by": "ann"})])  # fmt: skip


# fmt: off
LISTINGS: dict[str, tuple[dict[str, Any], int]] = {
    "the operator's page, newest first": ({"where": {"tool": ["refund"], "kind": [
        "action", None]}, "descending": True, "limit": 51}, 51),
    "the first page": ({"where": {"tool": ["refund"]}, "limit": 51}, 51),
    "a page after a cursor": ({"where": {"tool": ["refund"]}, "descending": True,
                               "after": "t000050", "limit": 11}, 11),
    "two tools, one unused": ({"where": {"tool": ["refund", "void"]}, "limit": 11}, 11),
    "a common status of a tool": ({"where": {"tool": ["refund"], "status": ["succeeded"]},
                                   "descending": True, "limit": 11}, 11),
    "a tool nobody called": ({"where": {"tool": ["void"]}, "limit": 11}, 0),
}
# fmt: on


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Backend, Backend]]:
    """Two ledgers alike but for the other tool's tasks: 100 and 2,000."""
    folder = tmp_path_factory.mktemp("tools")
    small, large = (open_backend(f"sqlite:///{folder / name}") for name in ("s.db", "l.db"))
    for backend, noise in ((small, NOISE_SMALL), (large, NOISE_LARGE)):
        _ledger(backend, noise)
    yield small, large
    small.close()
    large.close()


def _steps(backend: Backend, options: dict[str, Any], expected: int) -> int:
    with SQLiteSteps(backend) as counted:
        rows = backend.list_records("tasks", **options)
    assert len(rows) == expected, rows
    assert all(v["tool"] == "refund" for _, v in rows)
    return counted.steps


@pytest.mark.parametrize("name", list(LISTINGS))
def test_a_tool_listing_reads_its_page(sizes: tuple[Backend, Backend], name: str) -> None:
    small, large = (_steps(b, *LISTINGS[name]) for b in sizes)
    # 20x the other tool's tasks: the same work, give or take a level of the B-tree.
    assert large <= small + 2, (name, small, large)


def test_a_database_made_before_the_tool_column_gets_it_when_opened(tmp_path: Path) -> None:
    """An existing database (the records table with ``rare_status`` and
    ``owner`` but no ``tool``, as the previous release made it) gets the
    column, its values and its index, once."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE agentq_records (tbl TEXT NOT NULL, k TEXT NOT NULL, "
                     "v TEXT NOT NULL, rare_status TEXT, owner TEXT, PRIMARY KEY (tbl, k)) "
                     "WITHOUT ROWID")  # fmt: skip
        conn.executemany("INSERT INTO agentq_records (tbl, k, v) VALUES (?, ?, ?)", [
            ("tasks", "t1", '{"status":"dead","tool":"refund"}'),
            ("tasks", "t2", '{"status":"succeeded","tool":"ship"}'),
            ("tasks", "t3", '{"status":"succeeded","tool":3}'),
            ("tasks", "t4", "not json"),
            ("runs", "r1", '{"tool":"refund"}'),
        ])  # fmt: skip
    first, second = open_backend(f"sqlite:///{path}"), open_backend(f"sqlite:///{path}")
    try:
        for b in (first, second):
            assert [k for k, _ in b.list_records("tasks", where={"tool": ["refund"]})] == ["t1"]
        first.transact(lambda tx: tx.put_record("tasks", "t5", {"tool": "refund"}))
        refunds = second.list_records("tasks", where={"tool": ["refund"]}, descending=True)
        assert [k for k, _ in refunds] == ["t5", "t1"]
    finally:
        first.close()
        second.close()
    with sqlite3.connect(path) as conn:
        tools = conn.execute("SELECT tbl, k, tool FROM agentq_records WHERE tool IS NOT NULL "
                             "ORDER BY k").fetchall()  # fmt: skip
    assert tools == [("tasks", "t1", "refund"), ("tasks", "t2", "ship"), ("tasks", "t5", "refund")]
