"""sqlite3 errors a user can meet (a read-only or full database, a broken file)
reach them as agentq errors naming the database and what happened, with the
driver's exception kept as ``__cause__``.

A full disk is simulated with ``PRAGMA max_page_count`` (SQLite then fails a
write exactly as on a full disk: SQLITE_FULL). A read-only database is real:
its mode, or when the tests run as root (whom modes do not bind) the
immutable attribute (``chattr +i``).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentq import FakeClock, Runtime
from agentq.backends import Backend, Transaction, open_backend
from agentq.backends.sqlite import SQLiteBackend
from agentq.errors import BackendUnavailable, DatabaseNotWritable
from agentq.spec import QueueSpec

ROOT = Path(__file__).resolve().parents[2]


def _fill_up(backend: SQLiteBackend) -> None:
    """No page can be added to the database any more (as on a full disk)."""
    conn = backend._db._conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")


def _make_room(backend: SQLiteBackend) -> None:
    backend._db._conn.execute("PRAGMA max_page_count = 1073741823")


def _runtime(db: Path) -> Runtime:
    return Runtime(
        f"sqlite:///{db}",
        tools=ROOT / "tools",
        policies=ROOT / "policies",
        clock=FakeClock(),
        settings={"payments_url": "http://127.0.0.1:9"},
    )


def test_a_full_database_is_database_not_writable_and_nothing_is_half_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "full.db"
    backend = SQLiteBackend(str(db), clock=FakeClock())
    try:
        backend.create_queue(QueueSpec.simple("Jobs"))
        _fill_up(backend)

        def decide(tx: Transaction) -> None:
            tx.put_record("orders", "o-1", {"state": "decided"})
            tx.send("Jobs", "1", b"x" * 20_000)

        with pytest.raises(DatabaseNotWritable, match="full") as info:
            backend.transact(decide)
        assert str(db) in str(info.value)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert backend.get_record("orders", "o-1") is None
        assert backend.stats("Jobs").depth == 0
        _make_room(backend)  # the operator frees space: the same write now commits
        backend.transact(decide)
        assert backend.stats("Jobs").depth == 1
    finally:
        backend.close()


def test_enqueue_action_on_a_full_database_raises_database_not_writable(tmp_path: Path) -> None:
    rt = _runtime(tmp_path / "agentq.db")
    try:
        assert isinstance(rt.backend, SQLiteBackend)
        _fill_up(rt.backend)
        with pytest.raises(DatabaseNotWritable, match=r"agentq\.db.*full"):
            for i in range(200):  # the first that needs a new page fails
                rt.enqueue_action(
                    "execute_refund", {"order_id": f"o-{i}", "amount": 30}, idempotency_key=f"k{i}"
                )
    finally:
        rt.close()


# -- a read-only database -------------------------------------------------------


class ReadOnly:
    """Makes files or directories read-only for this process, for real: by their
    mode, or as root (whom modes do not bind) with the immutable attribute."""

    def __init__(self) -> None:
        self.done: list[Path] = []

    def __call__(self, path: Path) -> None:
        if os.geteuid() == 0:
            proc = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.skip(f"running as root and cannot make {path} immutable: {proc.stderr}")
        else:
            path.chmod(0o555 if path.is_dir() else 0o444)
        self.done.append(path)

    def undo(self) -> None:
        for path in reversed(self.done):
            if os.geteuid() == 0:
                subprocess.run(["chattr", "-i", str(path)], check=True)
            else:
                path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture
def read_only() -> Iterator[ReadOnly]:
    ro = ReadOnly()
    yield ro
    ro.undo()


def _make_database(directory: Path) -> Path:
    db = directory / "ledger.db"
    backend = open_backend(f"sqlite:///{db}")
    backend.create_queue(QueueSpec.simple("Jobs"))
    backend.transact(lambda tx: tx.send("Jobs", "1", b"x"))
    backend.close()
    return db


def test_writing_a_read_only_database_file_is_database_not_writable(
    tmp_path: Path, read_only: ReadOnly
) -> None:
    db = _make_database(tmp_path)
    read_only(db)  # the directory stays writable: SQLite can make its -wal, -shm
    backend = open_backend(f"sqlite:///{db}")
    try:
        assert backend.queues() == ["Jobs"]  # reading still works
        with pytest.raises(DatabaseNotWritable, match="read-only") as info:
            backend.transact(lambda tx: tx.send("Jobs", "2", b"x"))
        assert str(db) in str(info.value)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    finally:
        backend.close()


def test_opening_a_read_only_database_in_a_read_only_directory_is_database_not_writable(
    tmp_path: Path, read_only: ReadOnly
) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    db = _make_database(directory)
    read_only(db)
    read_only(directory)
    with pytest.raises(DatabaseNotWritable, match="read-only") as info:
        open_backend(f"sqlite:///{db}")
    assert str(db) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)


def test_enqueue_action_and_drain_on_a_read_only_database_raise_database_not_writable(
    tmp_path: Path, read_only: ReadOnly
) -> None:
    db = tmp_path / "agentq.db"
    rt = _runtime(db)
    task = rt.enqueue_action("execute_refund", {"order_id": "o-1", "amount": 30})
    rt.close()
    read_only(db)
    rt = _runtime(db)
    try:
        assert rt.task(task.task_id).status == "queued"  # reading still works
        with pytest.raises(DatabaseNotWritable, match="read-only"):
            rt.enqueue_action("execute_refund", {"order_id": "o-2", "amount": 30})
        with pytest.raises(DatabaseNotWritable, match="read-only"):
            rt.worker().drain()
    finally:
        rt.close()


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_read_only_database_agentq_cannot_set_up_is_refused_leaving_nothing_open(
    tmp_path: Path, read_only: ReadOnly
) -> None:
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.close()
    read_only(db)
    before = _open_fds()
    with pytest.raises(DatabaseNotWritable, match="read-only"):
        open_backend(f"sqlite:///{db}")
    assert not _open_fds() - before  # nothing left open (others may close meanwhile)


def test_a_database_in_a_directory_that_cannot_be_created_is_a_clear_error(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(BackendUnavailable, match=r"no/such/dir/x\.db") as info:
        open_backend(f"sqlite:///{missing}")
    assert info.value.__cause__ is not None


def test_a_file_that_is_not_a_database_is_backend_unavailable(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_bytes(b"these are my notes, not a database" * 100)
    with pytest.raises(BackendUnavailable, match=r"notes\.db.*not a SQLite database") as info:
        open_backend(f"sqlite:///{db}")
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


CALLS: dict[str, Callable[[Backend], object]] = {
    "transact": lambda b: b.transact(lambda tx: None),
    "get_record": lambda b: b.get_record("ledger", "x"),
    "read_records": lambda b: b.read_records("ledger", ["x"]),
    "list_records": lambda b: b.list_records("ledger"),
    "queues": lambda b: b.queues(),
    "stats": lambda b: b.stats("Jobs"),
    "renew": lambda b: b.renew("Jobs", ["t"]),
}


@pytest.mark.parametrize("where", ["file", "memory"])
@pytest.mark.parametrize("call", list(CALLS))
def test_a_closed_backend_says_so(tmp_path: Path, where: str, call: str) -> None:
    b = open_backend("sqlite:///:memory:" if where == "memory" else f"sqlite:///{tmp_path}/c.db")
    b.create_queue(QueueSpec.simple("Jobs"))
    b.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        CALLS[call](b)
