"""Issue 38 item 1 on SQLite: an agent's own task listing (``GET /v1/tasks`` as
an agent, the console's task page for a principal without operate or admin)
and the count of its tasks read the owner's page through the index of the
``owner`` column (``agentq.backends.owners``), not every task of the owner's.
Before, the filter on ``created_by`` was checked in each record's JSON: the
work grew with the owner's history (0.5 s for a page at 100,000 tasks on
PostgreSQL), which these tests saw on the code before (an agent's newest page
skipped every newer task of another owner's; its dead tasks were read among
everyone's dead ones).

Each listing runs at two sizes of the ledger (the owner's finished tasks, and
ten times as many of another owner's), and the work SQLite does for it (its virtual
machine's steps, which count the rows a query reads and drops) must not grow."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Backend, encode_record, open_backend
from tests.record_counter import SQLiteSteps

NOISE_SMALL, NOISE_LARGE = 100, 2000


def _history(b: Backend, count: int) -> None:
    """``count`` finished tasks of ann's, then ten times as many of bob's (newer:
    above ann's in key order), half of them succeeded and half dead."""
    b.transact(lambda tx: [
        tx.put_record("tasks", f"t{i:06d}", encode_record(
            {"status": "succeeded", "tool": "a", "created_by": "ann"}))
        for i in range(count)
    ] + [
        tx.put_record("tasks", f"t{i:06d}", encode_record(
            {"status": "dead" if i % 2 else "succeeded", "tool": "a", "created_by": "bob"}))
        for i in range(count, 11 * count)
    ])  # fmt: skip


def _wanted(b: Backend) -> None:
    def fill(tx: Any) -> None:
        tx.put_record("tasks", "t999990", {"status": "dead", "tool": "b", "created_by": "ann"})
        tx.put_record("tasks", "t999991", {"status": "queued", "tool": "b", "created_by": "ann"})
        tx.put_record("tasks", "t999992", {"status": "dead", "tool": "b", "created_by": "bob"})

    b.transact(fill)


# fmt: off
LISTINGS: dict[str, tuple[dict[str, Any], int]] = {
    # The agent's task page: newest first, its own, of the callers' kind.
    "an agent's page": ({"where": {"created_by": ["ann"], "kind": ["action", None]},
                         "descending": True, "limit": 51}, 51),
    "an agent's first page": ({"where": {"created_by": ["ann"]}, "limit": 51}, 51),
    "an agent's page after a cursor": ({"where": {"created_by": ["ann"]}, "descending": True,
                                        "after": "t000090", "limit": 11}, 11),
    "an agent's dead tasks": ({"where": {"created_by": ["ann"], "status": ["dead"]},
                               "limit": 11}, 1),
    "an agent's unfinished, rare": ({"where": {"created_by": ["ann"], "status": [
        "waiting", "awaiting_approval", "dead", "cancelled"]}}, 1),
    "an agent's newest queued": ({"where": {"created_by": ["ann"], "status": ["queued"]},
                                  "descending": True, "limit": 1}, 1),
}
# fmt: on


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Backend, Backend]]:
    """Two ledgers alike but for the owners' histories: 100 and 2,000 finished
    tasks of ann's (and ten times as many of bob's)."""
    folder = tmp_path_factory.mktemp("owners")
    small, large = (open_backend(f"sqlite:///{folder / name}") for name in ("s.db", "l.db"))
    for backend, count in ((small, NOISE_SMALL), (large, NOISE_LARGE)):
        _history(backend, count)
        _wanted(backend)
    yield small, large
    small.close()
    large.close()


def _steps(backend: Backend, options: dict[str, Any], expected: int) -> int:
    with SQLiteSteps(backend) as counted:
        rows = backend.list_records("tasks", **options)
    assert len(rows) == expected, rows
    assert all(v["created_by"] == "ann" for _, v in rows)
    return counted.steps


@pytest.mark.parametrize("name", list(LISTINGS))
def test_an_owners_listing_reads_its_page(sizes: tuple[Backend, Backend], name: str) -> None:
    small, large = (_steps(b, *LISTINGS[name]) for b in sizes)
    # 20x the owner's finished tasks: the same work, give or take a level of the B-tree.
    assert large <= small + 2, (name, small, large)


def test_an_owners_count_reads_one_row(sizes: tuple[Backend, Backend]) -> None:
    small, large = sizes
    for backend, count in ((small, NOISE_SMALL), (large, NOISE_LARGE)):
        with SQLiteSteps(backend) as counted:
            assert backend.record_count("tasks", owner="ann") == count + 2
        assert counted.steps <= 1, counted.steps


def test_a_database_made_before_the_owner_column_gets_it_when_opened(tmp_path: Path) -> None:
    """An existing database (the records table with ``rare_status`` but no
    ``owner``, as the previous release made it) gets the column, its values,
    its indexes and the owners' counts, once."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE agentq_records (tbl TEXT NOT NULL, k TEXT NOT NULL, "
                     "v TEXT NOT NULL, rare_status TEXT, PRIMARY KEY (tbl, k)) WITHOUT ROWID")
        conn.executemany("INSERT INTO agentq_records VALUES (?, ?, ?, ?)", [
            ("tasks", "t1", '{"status":"dead","created_by":"ann"}', "dead"),
            ("tasks", "t2", '{"status":"succeeded","created_by":"ann"}', None),
            ("tasks", "t3", '{"status":"succeeded","created_by":3}', None),
            ("tasks", "t4", "not json", None),
            ("tasks", "t5", '{"status":"succeeded"}', None),
            ("runs", "r1", '{"created_by":"ann"}', None),
        ])  # fmt: skip
        conn.execute("CREATE TABLE agentq_record_totals (tbl TEXT PRIMARY KEY, "
                     "n INTEGER NOT NULL) WITHOUT ROWID")  # fmt: skip
    first, second = open_backend(f"sqlite:///{path}"), open_backend(f"sqlite:///{path}")
    try:
        ann = first.list_records("tasks", where={"created_by": ["ann"], "status": ["dead"]})
        assert [k for k, _ in ann] == ["t1"]
        assert first.record_count("tasks", owner="ann") == 2  # counted once
        assert second.record_count("tasks", owner="ann") == 2
    finally:
        first.close()
        second.close()
    with sqlite3.connect(path) as conn:
        owned = conn.execute("SELECT k, owner FROM agentq_records WHERE owner IS NOT NULL "
                             "ORDER BY k").fetchall()  # fmt: skip
    assert owned == [("t1", "ann"), ("t2", "ann")]
