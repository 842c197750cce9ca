"""WAL checkpoints run in a thread of their own, never inside a writer's COMMIT."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.backends import Transaction
from agentq.backends.sqlite import SQLiteBackend, checkpoints
from agentq.backends.sqlite.checkpoints import BACKSTOP_PAGES, COMMITS_PER_CHECKPOINT


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SQLiteBackend]:
    b = SQLiteBackend(str(tmp_path / "c.db"))
    yield b
    b.close()


def _commit(backend: SQLiteBackend, n: int, first: int = 0) -> None:
    for i in range(first, first + n):

        def body(tx: Transaction, i: int = i) -> None:
            tx.put_record("t", f"k{i}", {"blob": "x" * 3000})

        backend.transact(body)


def _wait(condition: object, what: str) -> None:
    for _ in range(2000):  # up to 20 s: the thread is woken at once, normally within ms
        if callable(condition) and condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_commits_leave_checkpoints_to_the_background(backend: SQLiteBackend) -> None:
    conn = backend._db._conn
    # A writer's COMMIT checkpoints only past the backstop, far beyond SQLite's 1,000.
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES
    checkpointer = backend._db._checkpointer
    assert checkpointer is not None
    assert not checkpointer.running  # started by commits, not by opening the file
    _commit(backend, COMMITS_PER_CHECKPOINT * 3)
    _wait(lambda: checkpointer.checkpoints >= 1, "a background checkpoint")
    assert checkpointer.running


def test_the_background_checkpoint_copies_the_wal_into_the_file(
    tmp_path: Path, backend: SQLiteBackend
) -> None:
    checkpointer = backend._db._checkpointer
    assert checkpointer is not None
    _commit(backend, COMMITS_PER_CHECKPOINT)  # the 32nd commit wakes the thread
    _wait(lambda: checkpointer.checkpoints >= 1, "a background checkpoint")
    # Read the main file alone (no WAL): the checkpointed rows are in it.
    copy = tmp_path / "copy.db"
    copy.write_bytes((tmp_path / "c.db").read_bytes())
    plain = sqlite3.connect(copy)
    try:
        found = plain.execute("SELECT COUNT(*) FROM agentq_records WHERE tbl = 't'").fetchone()[0]
    finally:
        plain.close()
    assert found == COMMITS_PER_CHECKPOINT


def test_closing_the_backend_stops_the_thread(tmp_path: Path) -> None:
    b = SQLiteBackend(str(tmp_path / "s.db"))
    _commit(b, COMMITS_PER_CHECKPOINT)
    checkpointer = b._db._checkpointer
    assert checkpointer is not None
    _wait(lambda: checkpointer.running or checkpointer.checkpoints > 0, "the thread to start")
    b.close()
    assert not checkpointer.running


def test_a_checkpointer_that_cannot_connect_gives_up_and_commits_go_on(
    backend: SQLiteBackend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(checkpoints.sqlite3, "connect", refuse)
    checkpointer = backend._db._checkpointer
    assert checkpointer is not None
    with caplog.at_level(logging.INFO, logger="agentq.sqlite"):
        _commit(backend, COMMITS_PER_CHECKPOINT)
        _wait(lambda: checkpointer.broken, "the checkpointer to give up")
    assert "background checkpoints" in caplog.text
    _commit(backend, 1, first=COMMITS_PER_CHECKPOINT)
    # The next commit noticed: the writer checkpoints as SQLite does by default.
    assert backend._db._checkpointer is None
    conn = backend._db._conn
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    _commit(backend, COMMITS_PER_CHECKPOINT, first=COMMITS_PER_CHECKPOINT + 1)
    assert len(backend.list_records("t", limit=1000)) == COMMITS_PER_CHECKPOINT * 2 + 1


def test_an_in_memory_database_has_no_checkpointer() -> None:
    b = SQLiteBackend(":memory:")
    try:
        assert b._db._checkpointer is None
    finally:
        b.close()
