"""Read-then-write of one record from concurrent transactions never loses a write.

Dedupe keys (the dirty-flag pattern, :mod:`agentq.lifecycle.dedupe`) rely on it:
an enqueue reads the key's record and the task it names, then creates a task and
writes the record, and two concurrent enqueues must not both see "no pending
task". Every backend must serialise such transactions (SQLite: one writer at a
time; Spanner: locking reads, one of two conflicting transactions aborted and
re-run), so N transactions incrementing one counter leave it at exactly N.
"""

from __future__ import annotations

import threading

import pytest

from agentq.backends import Transaction

from .conftest import Harness

THREADS = 4
EACH = 10


@pytest.mark.needs("state", "threads")
def test_concurrent_read_then_write_transactions_are_serialised(harness: Harness) -> None:
    harness.backend.transact(lambda tx: tx.put_record("counters", "c", {"n": 0, "by": []}))
    errors: list[BaseException] = []

    def bump(tx: Transaction, who: str) -> None:
        rec = tx.get_record("counters", "c") or {"n": 0, "by": []}
        tx.put_record("counters", "c", {"n": rec["n"] + 1, "by": [*rec["by"], who]})

    def worker(i: int) -> None:
        backend = harness.reopen()
        try:
            for j in range(EACH):
                backend.transact(lambda tx, who=f"{i}.{j}": bump(tx, who))
        except BaseException as exc:  # reported below, with the thread's error
            errors.append(exc)
        finally:
            backend.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    final = harness.backend.get_record("counters", "c")
    assert final is not None
    assert final["n"] == THREADS * EACH  # no lost update
    assert sorted(final["by"]) == sorted(f"{i}.{j}" for i in range(THREADS) for j in range(EACH))
