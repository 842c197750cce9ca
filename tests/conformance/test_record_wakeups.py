"""A reader waiting for a record is woken by the commits that wrote it, not by
every commit (issue 27 item 10: every commit woke every parked long-poll and
event stream; 150 of them made 300 other enqueues take 8.0 s instead of 0.9 s).

The wake-up of a commit made through this process is set before ``transact``
returns, so the counts are exact; a backend that also watches other processes
(SQLite's watcher) may add one wake-up the first time it looks at the record,
never one per commit.
"""

from __future__ import annotations

import threading

import pytest

from agentq.backends.notify import record_topic

from .conftest import Harness


class CountingWake:
    """A wake-up that counts how often it was set."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            self.count += 1


@pytest.mark.needs("state")
def test_a_reader_of_a_record_wakes_for_its_writes_only(harness: Harness) -> None:
    b = harness.backend
    b.transact(lambda tx: tx.put_record("ledger", "mine", {"n": 0}))
    mine, everything = CountingWake(), CountingWake()
    b.subscribe_commits(mine, record_topic("ledger", "mine"))
    b.subscribe_commits(everything)
    try:
        for i in range(20):
            b.transact(lambda tx, i=i: tx.put_record("ledger", f"other{i}", {"n": i}))
        unrelated = mine.count
        assert unrelated <= 1, f"{unrelated} wake-ups for 20 commits that did not write it"
        assert everything.count >= 20  # a reader of everything still hears every commit

        b.transact(lambda tx: tx.put_record("ledger", "mine", {"n": 1}))
        assert mine.count >= unrelated + 1
        woken = mine.count
        b.transact(lambda tx: tx.delete_record("ledger", "mine"))
        assert mine.count >= woken + 1
    finally:
        b.unsubscribe_commits(mine)
        b.unsubscribe_commits(everything)
