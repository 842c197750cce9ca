"""The cross-process writer lock: exclusive, bounded, optional."""

from __future__ import annotations

import threading
from pathlib import Path

from agentq import open_backend
from agentq.backends.sqlite.writer_lock import WriterLock


def test_a_second_holder_waits_and_gives_up_after_its_timeout(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    first, second = WriterLock(db, timeout=5.0), WriterLock(db, timeout=0.02)
    try:
        assert first.acquire()
        assert not second.acquire()  # bounded: returns instead of hanging
        first.release()
        assert second.acquire()
        second.release()
    finally:
        first.close()
        second.close()


def test_a_waiter_gets_the_lock_soon_after_release(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    holder, waiter = WriterLock(db, timeout=5.0), WriterLock(db, timeout=5.0)
    got = threading.Event()
    assert holder.acquire()

    def wait_for_it() -> None:
        if waiter.acquire():
            got.set()

    t = threading.Thread(target=wait_for_it)
    t.start()
    assert not got.wait(0.05)
    holder.release()
    assert got.wait(5.0)
    t.join()
    waiter.release()
    holder.close()
    waiter.close()


def test_without_a_lock_file_the_lock_is_simply_not_taken(tmp_path: Path) -> None:
    lock = WriterLock(str(tmp_path / "missing-dir" / "x.db"), timeout=1.0)
    assert not lock.acquire()  # SQLite's own busy handling still orders writers
    lock.release()
    lock.close()


def test_the_backend_takes_the_lock_only_inside_a_write(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    backend = open_backend(f"sqlite:///{db}")
    probe = WriterLock(str(db), timeout=0.0)
    seen: list[bool] = []
    try:
        assert probe.acquire()  # idle backend: free
        probe.release()
        backend.transact(lambda tx: seen.append(probe.acquire()))
        assert seen == [False]  # held by the transaction
        assert probe.acquire()  # released after COMMIT
        probe.release()
    finally:
        probe.close()
        backend.close()
