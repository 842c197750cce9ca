"""Ctrl-C while the SQLite watcher's thread is starting (``agentq enqueue --wait``
interrupted at that moment, seen once in CI) must leave ``close`` working: it
raised ``RuntimeError: cannot join thread before it is started``, so the CLI
printed a traceback and exited 1 instead of 130 with its one line."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agentq.backends.sqlite import SQLiteBackend
from agentq.backends.sqlite import watcher as sqlite_watcher


class _InterruptedStart(threading.Thread):
    def start(self) -> None:
        raise KeyboardInterrupt  # Ctrl-C before the thread said it ran


def test_close_after_an_interrupted_watcher_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SQLiteBackend(str(tmp_path / "q.db"))
    woken = threading.Event()
    monkeypatch.setattr(sqlite_watcher.threading, "Thread", _InterruptedStart)
    with pytest.raises(KeyboardInterrupt):
        backend.subscribe_commits(woken)
    backend.close()  # no RuntimeError: nothing was started, nothing to join
    with pytest.raises(Exception, match="closed"):
        backend.transact(lambda tx: None)
