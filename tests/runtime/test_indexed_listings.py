"""Issue 38 item 1 on SQLite: tasks listed by a rare status (``GET
/v1/tasks?status=dead``, the dead-letter and waiting views, the overview's
unfinished counts) read the tasks that match, through the index of the
``rare_status`` column, not every task. Before, SQLite checked the filter on
every record of the table (164 ms at 100,000 tasks with none dead).

Each listing runs at two sizes of the table (finished noise that does not
match), and the work SQLite does for it (its virtual machine's steps, which
count the rows a query reads and drops) must not grow."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Backend, open_backend
from tests.record_counter import SQLiteSteps

NOISE_SMALL, NOISE_LARGE = 100, 2000


def _noise(b: Backend, start: int, count: int) -> None:
    b.transact(lambda tx: [
        (tx.put_record("tasks", f"t{i:06d}", {"status": "succeeded", "tool": "a"}),
         tx.put_record("approvals", f"a{i:06d}", {"status": "approved"}),
         tx.put_record("runs", f"r{i:06d}", {"status": "succeeded", "agent": "a"}))
        for i in range(start, start + count)
    ])  # fmt: skip


def _wanted(b: Backend) -> None:
    def fill(tx: Any) -> None:
        tx.put_record("tasks", "t999990", {"status": "dead", "tool": "b"})
        tx.put_record("tasks", "t999991", {"status": "waiting", "tool": "b"})
        tx.put_record("tasks", "t999992", {"status": "awaiting_approval", "tool": "c"})
        tx.put_record("approvals", "a999990", {"status": "pending"})
        tx.put_record("runs", "r999990", {"status": "awaiting_approval", "agent": "a"})
        tx.put_record("runs", "r999991", {"status": "failed", "agent": "b"})
        tx.put_record("runs", "r999992", {"status": "queued", "agent": "a"})

    b.transact(fill)


# fmt: off
LISTINGS: dict[str, tuple[str, dict[str, Any], int]] = {
    "dead tasks": ("tasks", {"where": {"status": ["dead"]}, "limit": 11}, 1),
    "no task cancelled": ("tasks", {"where": {"status": ["cancelled"]}, "limit": 11}, 0),
    "unfinished, rare": ("tasks", {"where": {"status": ["waiting", "awaiting_approval",
                                                     "dead"]}}, 3),
    "newest dead of a tool": ("tasks", {"where": {"status": ["dead"], "tool": ["b"]},
                               "descending": True, "limit": 1}, 1),
    "open approvals": ("approvals", {"where": {"status": ["pending", "escalated"]},
                                     "limit": 201}, 1),
    "runs awaiting approval": ("runs", {"where": {"status": ["awaiting_approval"]},
                                        "limit": 101}, 1),
    "newest failed run of an agent": ("runs", {"where": {"status": ["failed"], "agent": ["b"]},
                                               "descending": True, "limit": 1}, 1),
    "no run cancelled": ("runs", {"where": {"status": ["cancelled"]}, "limit": 101}, 0),
    # The console's runs in progress (running is stored as queued).
    "runs in progress": ("runs", {"where": {"status": ["queued"]}, "descending": True,
                                  "limit": 101}, 1),
}
# fmt: on


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Backend, Backend]]:
    """Two ledgers alike but for the noise: 100 and 2,000 finished tasks (and
    decided approvals)."""
    folder = tmp_path_factory.mktemp("sizes")
    small, large = (open_backend(f"sqlite:///{folder / name}") for name in ("s.db", "l.db"))
    for backend, count in ((small, NOISE_SMALL), (large, NOISE_LARGE)):
        _noise(backend, 0, count)
        _wanted(backend)
    yield small, large
    small.close()
    large.close()


def _steps(backend: Backend, table: str, options: dict[str, Any], expected: int) -> int:
    with SQLiteSteps(backend) as counted:
        rows = backend.list_records(table, **options)
    assert len(rows) == expected, rows
    return counted.steps


@pytest.mark.parametrize("name", list(LISTINGS))
def test_a_listing_by_rare_status_reads_what_it_returns(
    sizes: tuple[Backend, Backend], name: str
) -> None:
    small, large = (_steps(b, *LISTINGS[name]) for b in sizes)
    # 20x the records that do not match: the same work, give or take a level of the B-tree.
    assert large <= small + 2, (name, small, large)


def test_a_database_made_before_the_column_gets_it_when_opened(tmp_path: Path) -> None:
    """An existing database (the records table without ``rare_status``, as an
    earlier release made it) gets the column, its values and the index, once."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE agentq_records (tbl TEXT NOT NULL, k TEXT NOT NULL, "
                     "v TEXT NOT NULL, PRIMARY KEY (tbl, k)) WITHOUT ROWID")  # fmt: skip
        conn.executemany("INSERT INTO agentq_records VALUES (?, ?, ?)", [
            ("tasks", "t1", '{"status":"dead","tool":"a"}'),
            ("tasks", "t2", '{"status":"succeeded","tool":"a"}'),
            ("tasks", "t3", '{"status":3}'),
            ("tasks", "t4", "not json"),
            ("runs", "r1", '{"status":"dead"}'),
        ])  # fmt: skip
    first, second = open_backend(f"sqlite:///{path}"), open_backend(f"sqlite:///{path}")
    try:
        assert [k for k, _ in first.list_records("tasks", where={"status": ["dead"]})] == ["t1"]
        assert [k for k, _ in second.list_records("runs", where={"status": ["dead"]})] == ["r1"]
        assert first.record_count("tasks") == 4  # counted once, by the first to open it
    finally:
        first.close()
        second.close()
    with sqlite3.connect(path) as conn:
        marked = conn.execute("SELECT k, rare_status FROM agentq_records "
                              "WHERE rare_status IS NOT NULL").fetchall()  # fmt: skip
    assert marked == [("t1", "dead")]


def test_a_database_made_before_runs_joined_the_index_gets_theirs_once(tmp_path: Path) -> None:
    """A database of the release before (the column, its index and the counts,
    but durable runs out of the index) gets its runs' rare statuses when this
    version first opens it, and a listing of parked runs then finds them."""
    path = tmp_path / "runs.db"
    made = open_backend(f"sqlite:///{path}")
    made.close()
    with sqlite3.connect(path) as conn:  # as the release before left it
        conn.execute("DELETE FROM agentq_records WHERE tbl = 'agentq#marks'")
        conn.executemany("INSERT INTO agentq_records (tbl, k, v) VALUES ('runs', ?, ?)", [
            ("r1", '{"status":"awaiting_tools"}'), ("r2", '{"status":"succeeded"}'),
            ("r3", '{"status":"failed"}'), ("r4", "not json"), ("r5", '{"status":"queued"}'),
        ])  # fmt: skip
    first, second = open_backend(f"sqlite:///{path}"), open_backend(f"sqlite:///{path}")
    try:
        parked = {"status": ["awaiting_tools", "failed"]}
        assert [k for k, _ in first.list_records("runs", where=parked)] == ["r1", "r3"]
        assert [k for k, _ in second.list_records("runs", where=parked)] == ["r1", "r3"]
        assert [k for k, _ in first.list_records("runs", where={"status": ["queued"]})] == ["r5"]
    finally:
        first.close()
        second.close()
    with sqlite3.connect(path) as conn:
        marked = conn.execute("SELECT k, rare_status FROM agentq_records WHERE tbl = 'runs' "
                              "AND rare_status IS NOT NULL ORDER BY k").fetchall()  # fmt: skip
    assert marked == [("r1", "awaiting_tools"), ("r3", "failed"), ("r5", "queued")]
