"""SQLite's record counts (:mod:`agentq.backends.sqlite.totals`): a counted
record's commit writes no page for its count (the count is a row next to the
newest task), and a database counted the earlier way (a totals table) is
moved to the new way, once, when opened."""

from __future__ import annotations

import sqlite3
import struct
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from agentq.backends import Transaction, open_backend
from agentq.backends.sqlite import SQLiteBackend


def _btrees_written(
    path: Path, commits: int, write: Callable[[int, Transaction], None]
) -> Counter[str]:
    """The b-trees whose pages ``commits`` calls of ``write`` put in the WAL, by name
    (pages of no b-tree, such as auto-vacuum's pointer maps, as ``?``)."""
    backend = SQLiteBackend(str(path), durability="normal")
    try:
        backend.transact(lambda tx: tx.put_record("tool_catalog", "zz", {}))  # a table after
        for i in range(20):
            backend.transact(partial(write, i))
        db = backend._db
        db.read(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())
        for i in range(20, 20 + commits):
            backend.transact(partial(write, i))
        page = db.read(lambda c: c.execute("PRAGMA page_size").fetchone()[0])
        wal = Path(f"{path}-wal").read_bytes()
    finally:
        backend.close()
    pages = [struct.unpack(">I", wal[off : off + 4])[0]
             for off in range(32, len(wal) - 23, 24 + page)]  # fmt: skip
    with sqlite3.connect(path) as conn:
        try:
            names = dict(conn.execute("SELECT pageno, name FROM dbstat").fetchall())
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table")
    return Counter(names.get(p, "?") for p in pages)


def test_a_counted_record_commit_writes_no_page_for_its_count(tmp_path: Path) -> None:
    def write(i: int, tx: Transaction) -> None:
        tx.put_record("tasks", f"t{i:06d}", {"n": i})

    written = _btrees_written(tmp_path / "c.db", 100, write)
    # The task's page and nothing else (a page split, rarely: one or two more).
    assert set(written) - {"?"} == {"agentq_records"}, written
    assert sum(written.values()) < 1.5 * 100, written


_OLD_SCHEMA = (
    "CREATE TABLE agentq_records (tbl TEXT NOT NULL, k TEXT NOT NULL, v TEXT NOT NULL, "
    "rare_status TEXT, PRIMARY KEY (tbl, k)) WITHOUT ROWID",
    "CREATE TABLE agentq_record_totals (tbl TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
    *(f"CREATE TRIGGER agentq_records_total_{name} AFTER {name.upper()} ON agentq_records "
      f"WHEN {row}.tbl IN ('dead_letters', 'tasks') BEGIN INSERT INTO agentq_record_totals "
      f"(tbl, n) VALUES ({row}.tbl, {n}) ON CONFLICT (tbl) DO UPDATE SET n = n + excluded.n; END"
      for name, row, n in (("insert", "new", 1), ("delete", "old", -1))),
)  # fmt: skip


def test_a_database_counted_by_a_totals_table_is_moved_when_opened(tmp_path: Path) -> None:
    """As the release before made it: totals in a table of their own, kept by
    triggers (and here wrong, as if an older writer had missed some)."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        for statement in _OLD_SCHEMA:
            conn.execute(statement)
        conn.executemany("INSERT INTO agentq_records (tbl, k, v) VALUES (?, ?, ?)", [
            ("tasks", "t1", "{}"), ("tasks", "t2", "{}"), ("dead_letters", "d1", "{}"),
            ("runs", "r1", "{}"),
        ])  # fmt: skip
        conn.execute("UPDATE agentq_record_totals SET n = 7 WHERE tbl = 'tasks'")
    first, second = open_backend(f"sqlite:///{path}"), open_backend(f"sqlite:///{path}")
    try:
        assert (first.record_count("tasks"), first.record_count("dead_letters")) == (2, 1)
        second.transact(lambda tx: tx.put_record("tasks", "t3", {}))
        first.transact(lambda tx: tx.delete_record("dead_letters", "d1"))
        assert (second.record_count("tasks"), second.record_count("dead_letters")) == (3, 0)
        assert [k for k, _ in first.list_records("tasks")] == ["t1", "t2", "t3"]
    finally:
        first.close()
        second.close()
    with sqlite3.connect(path) as conn:
        left = conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%total%'").fetchall()
    assert left == []
