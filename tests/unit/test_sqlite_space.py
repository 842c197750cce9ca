"""SQLite gives deleted rows' space back (issue 14): a new file uses incremental
auto-vacuum, a file made before keeps working (and is converted once by
``vacuum``), and reclaiming frees at most what it is asked to, in one step."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentq.backends import open_backend
from agentq.backends.sqlite import SQLiteBackend


def _fill_and_empty(backend: SQLiteBackend, n: int = 400) -> None:
    backend.transact(lambda tx: [tx.put_record("blobs", f"k{i:04d}", {"v": "x" * 2000})
                                 for i in range(n)])  # fmt: skip
    backend.transact(lambda tx: [tx.delete_record("blobs", f"k{i:04d}") for i in range(n)])


def _sqlite(backend: object) -> SQLiteBackend:
    assert isinstance(backend, SQLiteBackend)
    return backend


def test_a_new_database_gives_free_pages_back_in_bounded_steps(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    backend = _sqlite(open_backend(f"sqlite:///{path}"))
    try:
        assert backend.storage().auto_vacuum == "incremental"
        backend.transact(lambda tx: tx.put_record("keep", "k", {"v": 1}))
        _fill_and_empty(backend)
        before = backend.storage()
        assert before.free_pages > 100
        step = 16 * before.page_size
        assert backend.reclaim_space(step) == step  # one bounded step
        assert backend.storage().free_pages == before.free_pages - 16
        while backend.reclaim_space(1 << 20):
            pass
        after = backend.storage()
        assert after.free_pages == 0 and after.pages < before.pages - 100
        assert backend.get_record("keep", "k") == {"v": 1}
        assert backend.reclaim_space(0) == 0
    finally:
        backend.close()


def test_a_database_made_without_auto_vacuum_still_works_and_vacuum_converts_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")  # as agentq made files before
    conn.execute("CREATE TABLE app (x)")
    conn.close()
    backend = _sqlite(open_backend(f"sqlite:///{path}"))
    try:
        assert backend.storage().auto_vacuum == "none"
        _fill_and_empty(backend)
        assert backend.storage().free_pages > 100
        assert backend.reclaim_space(1 << 20) == 0  # free pages are only reused
        before, after = backend.vacuum()
        assert (before.auto_vacuum, after.auto_vacuum) == ("none", "incremental")
        assert after.free_pages == 0 and after.pages < before.pages
        _fill_and_empty(backend)
        assert backend.reclaim_space(1 << 20) > 0
        backend.transact(lambda tx: tx.put_record("keep", "k", {"v": 2}))
        assert backend.get_record("keep", "k") == {"v": 2}
    finally:
        backend.close()
