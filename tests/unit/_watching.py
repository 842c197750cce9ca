"""Waiting for a SQLite receiver to be watched, for the watcher's real-time tests."""

from __future__ import annotations

import time

from agentq.backends.sqlite import SQLiteBackend


def wait_until_watching(backend: SQLiteBackend, bound: float = 30) -> None:
    """Until a receiver waits and the watcher thread has run its first check."""
    watcher = backend._watcher
    assert watcher is not None
    deadline = time.monotonic() + bound
    while not (watcher._waiters and watcher._polls):
        assert time.monotonic() < deadline, "the receiver never started waiting"
        time.sleep(0.001)
