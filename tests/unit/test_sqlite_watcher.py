"""The SQLite watcher wakes a waiting receiver on a commit it did not make itself
(any other program writing the file; other agentq processes also ring the
doorbell, :mod:`tests.unit.test_sqlite_doorbell`), with inotify where the
platform has it and by polling elsewhere. Real time, bounded."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from agentq.backends import Message
from agentq.backends.sqlite import SQLiteBackend
from agentq.backends.sqlite import watcher as sqlite_watcher
from agentq.clock import SystemClock, to_micros
from agentq.spec import QueueSpec
from tests.unit._watching import wait_until_watching

pytestmark = pytest.mark.slow


def _commit_foreign_message_and_wait(
    backend: SQLiteBackend, db: Path, got: list[list[Message]]
) -> None:
    """Send "ping" from a plain connection (no agentq in-process notification, only
    the file changes) and check the waiting receiver got it promptly."""
    raw = sqlite3.connect(db, isolation_level=None)
    now = to_micros(backend.clock.now())
    sent_at = time.monotonic()
    raw.execute(backend._queue_sql("Jobs").insert, ("ping", b'"x"', now, now, 7))
    raw.close()
    while not got and time.monotonic() - sent_at < 10:
        time.sleep(0.001)
    # The bound only tells a wake-up from the receiver's full 20 s wait; it was 2 s,
    # which also had to cover the foreign commit's fsync on a loaded shared disk.
    assert got and got[0][0].key == ("ping",)
    assert time.monotonic() - sent_at < 10.0


@pytest.mark.parametrize("mode", ["inotify", "polling"])
def test_a_foreign_commit_wakes_a_waiting_receiver(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if mode == "inotify" and sqlite_watcher._INotify is None:
        pytest.skip("no inotify on this platform")
    if mode == "polling":
        monkeypatch.setattr(sqlite_watcher, "_INotify", None)
    db = tmp_path / "w.db"
    backend = SQLiteBackend(str(db), clock=SystemClock())
    backend.create_queue(QueueSpec.simple("Jobs"))
    got: list[list[Message]] = []
    receiver = threading.Thread(
        target=lambda: got.extend(backend.stream("Jobs", 10, max_duration=20))
    )
    receiver.start()
    try:
        assert backend._watcher is not None
        wait_until_watching(backend)
        assert backend._watcher.blocking is (mode == "inotify")
        # A program writing without agentq rings no doorbell: with inotify the
        # periodic check of the WAL finds its message, polling the WAL's change.
        _commit_foreign_message_and_wait(backend, db, got)
    finally:
        backend.close()
        receiver.join(30)


def test_without_a_file_to_watch_it_polls_and_watches_once_the_file_appears(
    tmp_path: Path,
) -> None:
    if sqlite_watcher._INotify is None:
        pytest.skip("no inotify on this platform")
    db = tmp_path / "w.db"
    backend = SQLiteBackend(str(db), clock=SystemClock())
    backend.create_queue(QueueSpec.simple("Jobs"))
    assert backend._watcher is not None
    missing = tmp_path / "elsewhere-wal"
    backend._watcher._wal = str(missing)  # as if the WAL had been deleted
    got: list[list[Message]] = []
    receiver = threading.Thread(
        target=lambda: got.extend(backend.stream("Jobs", 10, max_duration=20))
    )
    receiver.start()
    try:
        wait_until_watching(backend)
        assert not backend._watcher.blocking  # polling (PRAGMA data_version) instead
        _commit_foreign_message_and_wait(backend, db, got)
        missing.write_bytes(b"")  # the file is back: the next check watches it
        for _ in range(200):
            if backend._watcher.blocking:
                break
            time.sleep(0.01)
        assert backend._watcher.blocking
    finally:
        backend.close()
        receiver.join(30)
