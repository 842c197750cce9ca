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


def _runs(b: Backend, count: int) -> None:
    """``count`` finished runs of ann's, ten times as many of bob's after them,
    then one of ann's parked and one queued."""
    b.transact(lambda tx: [
        tx.put_record("runs", f"r{i:06d}", {"status": "succeeded", "owner": "ann",
                                            "messages": [{"role": "user", "content": "x" * 200}]})
        for i in range(count)
    ] + [
        tx.put_record("runs", f"r{i:06d}", {"status": "succeeded", "owner": "bob",
                                            "messages": [{"role": "user", "content": "x" * 200}]})
        for i in range(count, 11 * count)
    ] + [
        tx.put_record("runs", "r999990", {"status": "awaiting_approval", "owner": "ann"}),
        tx.put_record("runs", "r999991", {"status": "queued", "owner": "ann"}),
    ])  # fmt: skip


# fmt: off
RUN_LISTINGS: dict[str, tuple[dict[str, Any], int]] = {
    # GET /v1/runs as an agent: its own, newest first, a page and one more.
    "an agent's runs": ({"where": {"owner": ["ann"]}, "descending": True, "limit": 101}, 101),
    "an agent's parked runs": ({"where": {"owner": ["ann"], "status": [
        "awaiting_approval", "awaiting_tools"]}, "descending": True, "limit": 101}, 1),
    "an agent's runs after a cursor": ({"where": {"owner": ["ann"]}, "descending": True,
                                        "after": "r000090", "limit": 11}, 11),
}
# fmt: on


@pytest.fixture(scope="module")
def run_sizes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Backend, Backend]]:
    folder = tmp_path_factory.mktemp("run-owners")
    small, large = (open_backend(f"sqlite:///{folder / name}") for name in ("s.db", "l.db"))
    for backend, count in ((small, NOISE_SMALL), (large, NOISE_LARGE)):
        _runs(backend, count)
    yield small, large
    small.close()
    large.close()


@pytest.mark.parametrize("name", list(RUN_LISTINGS))
def test_an_owners_runs_listing_reads_its_page(
    run_sizes: tuple[Backend, Backend], name: str
) -> None:
    def steps(backend: Backend) -> int:
        options, expected = RUN_LISTINGS[name]
        with SQLiteSteps(backend) as counted:
            rows = backend.list_records("runs", **options)
        assert len(rows) == expected and all(v["owner"] == "ann" for _, v in rows), rows
        return counted.steps

    small, large = (steps(b) for b in run_sizes)
    assert large <= small + 2, (name, small, large)


def test_a_database_whose_runs_came_before_their_owners_gets_them_once(tmp_path: Path) -> None:
    """A database of the previous release (the owner column, but runs stored
    without their owners in it) gets its runs' owners, and their counts, once."""
    path = tmp_path / "old.db"
    made = open_backend(f"sqlite:///{path}")
    made.transact(lambda tx: [
        tx.put_record("runs", "r1", {"status": "succeeded", "owner": "ann"}),
        tx.put_record("runs", "r2", {"status": "succeeded", "owner": "bob", "created_by": "ann"}),
        tx.put_record("runs", "r3", {"status": "succeeded", "owner": 3}),
        tx.put_record("tasks", "t1", {"status": "succeeded", "created_by": "ann", "owner": "bob"}),
    ])  # fmt: skip
    made.close()
    with sqlite3.connect(path) as conn:  # as the previous release left it
        conn.execute("UPDATE agentq_records SET owner = NULL WHERE tbl = 'runs'")
        conn.execute("DELETE FROM agentq_records WHERE tbl = 'runs#owner' "
                     "OR (tbl = 'agentq#marks' AND k = 'runs_owner')")  # fmt: skip
    first, second = open_backend(f"sqlite:///{path}"), open_backend(f"sqlite:///{path}")
    try:
        for b in (first, second):
            assert [k for k, _ in b.list_records("runs", where={"owner": ["ann"]})] == ["r1"]
        first.transact(lambda tx: tx.put_record("runs", "r4", {"owner": "ann"}))
        assert [k for k, _ in second.list_records("runs", where={"owner": ["ann"]})] == [
            "r1", "r4"]  # fmt: skip
    finally:
        first.close()
        second.close()
    with sqlite3.connect(path) as conn:
        owned = conn.execute("SELECT tbl, k, owner FROM agentq_records WHERE owner IS NOT NULL "
                             "ORDER BY tbl, k").fetchall()  # fmt: skip
        counted = conn.execute("SELECT k, v FROM agentq_records WHERE tbl = 'runs#owner' "
                               "ORDER BY k").fetchall()  # fmt: skip
    assert owned == [("runs", "r1", "ann"), ("runs", "r2", "bob"), ("runs", "r4", "ann"),
                     ("tasks", "t1", "ann")]  # fmt: skip
    assert [(k, int(v)) for k, v in counted] == [("ann", 2), ("bob", 1)]
