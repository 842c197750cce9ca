"""``Transaction.add_tallies``, ``Backend.read_tallies`` and ``delete_tallies``
(issue 38 item 1): the per-minute tallies of finished tasks that the console's
chart reads instead of the ledger. They add up across transactions and within
one, a rolled-back transaction adds nothing, a read sums a window's minutes
per slot (everyone's, or one owner's), concurrent writers lose nothing, and a
prune deletes the minutes before a bound."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentq.backends.tallies import Tally

from .conftest import Harness

M = 29_000_000  # a minute since the epoch (in 2025)


def _t(minute: int, outcome: str = "succeeded", bucket: int = 3, n: int = 1,
       owner: str = "local") -> Tally:  # fmt: skip
    return Tally(minute, owner, outcome, bucket, n)


@pytest.mark.needs("state")
def test_tallies_add_up_per_minute_outcome_and_bucket(harness: Harness) -> None:
    b = harness.backend
    assert b.read_tallies(M, M + 60) == []
    b.transact(lambda tx: tx.add_tallies([_t(M), _t(M), _t(M, "dead", -1), _t(M + 1, n=4)]))
    b.transact(lambda tx: tx.add_tallies([_t(M, n=2), _t(M + 1, owner="agent")]))
    b.transact(lambda tx: tx.add_tallies([]))

    def undone(tx: Any) -> None:
        tx.add_tallies([_t(M, n=100)])
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        b.transact(undone)
    assert b.read_tallies(M, M + 60) == [
        Tally(M, "", "dead", -1, 1), Tally(M, "", "succeeded", 3, 4),
        Tally(M + 1, "", "succeeded", 3, 5),
    ]  # fmt: skip
    assert b.read_tallies(M, M + 60, owner="agent") == [Tally(M + 1, "agent", "succeeded", 3, 1)]
    assert b.read_tallies(M + 1, M + 2, owner="nobody") == []
    # Slots of 30 minutes from M - 10: both minutes fall in the first.
    assert b.read_tallies(M - 10, M + 50, width=30) == [
        Tally(M - 10, "", "dead", -1, 1), Tally(M - 10, "", "succeeded", 3, 9),
    ]  # fmt: skip
    assert b.read_tallies(M + 1, M + 2) == [Tally(M + 1, "", "succeeded", 3, 5)]
    with pytest.raises(ValueError):
        b.transact(lambda tx: tx.add_tallies([_t(M, "cancelled")]))
    with pytest.raises(ValueError):
        b.read_tallies(M, M + 1, width=0)


@pytest.mark.needs("state")
def test_concurrent_writers_lose_no_tally(harness: Harness) -> None:
    b = harness.backend
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(5):
                b.transact(lambda tx: tx.add_tallies([_t(M, n=2), _t(M + 1)]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert b.read_tallies(M, M + 2) == [
        Tally(M, "", "succeeded", 3, 30), Tally(M + 1, "", "succeeded", 3, 15),
    ]  # fmt: skip


@pytest.mark.needs("state")
def test_a_prune_deletes_the_minutes_before_a_bound(harness: Harness) -> None:
    b = harness.backend
    b.transact(lambda tx: tx.add_tallies([_t(M), _t(M + 1), _t(M + 2, "dead")]))
    assert b.read_tallies(M, M + 3)  # read once: PostgreSQL folds its changes here
    b.transact(lambda tx: tx.add_tallies([_t(M + 1)]))  # and one not folded yet
    assert b.delete_tallies(M + 2) >= 2
    assert b.read_tallies(M, M + 3) == [Tally(M + 2, "", "dead", 3, 1)]
    assert b.delete_tallies(M) == 0


@pytest.mark.needs("state")
def test_compaction_merges_a_minutes_rows_and_changes_no_read(harness: Harness) -> None:
    """``compact_tallies`` (run by the pruner every pass): the rows of each past
    minute merged into one per owner, outcome and bucket. On Spanner each
    transaction wrote a record of its own, so a day's chart read one record per
    completion transaction (the ledger again); now one per minute."""
    from agentq.backends.tallies import TALLY_TABLE

    b = harness.backend
    for i in range(6):
        b.transact(lambda tx, i=i: tx.add_tallies(
            [_t(M + i % 3), _t(M + i % 3, owner="agent", bucket=i % 2)]))  # fmt: skip
    b.transact(lambda tx: tx.add_tallies([_t(M + 3, n=5)]))  # a minute not yet past
    everyone, agents = b.read_tallies(M, M + 4), b.read_tallies(M, M + 4, owner="agent")
    spanner, sqlite = harness.kind.startswith("spanner"), harness.kind.startswith("sqlite")
    # Spanner: 6 records of 3 minutes became 3; PostgreSQL's read folded already.
    assert b.compact_tallies(M + 3) == (3 if spanner else 0)
    assert b.read_tallies(M, M + 4) == everyone
    assert b.read_tallies(M, M + 4, owner="agent") == agents
    assert b.compact_tallies(M + 3) == 0
    b.transact(lambda tx: tx.add_tallies([_t(M, owner="agent", bucket=0)]))
    # One more row of minute M: a change to fold, a second record to merge.
    assert b.compact_tallies(M + 3) == (0 if sqlite else 1)
    bumped = [t if (t.minute, t.bucket) != (M, 0) else Tally(M, "agent", "succeeded", 0, 2)
              for t in agents]  # fmt: skip
    assert b.read_tallies(M, M + 4, owner="agent") == bumped
    if spanner:
        keys = [k for k, _ in b.list_records(TALLY_TABLE)]
        assert sorted(k[:12] for k in keys) == [f"{m:012d}" for m in (M, M + 1, M + 2, M + 3)]


@pytest.mark.needs("state", "threads")
def test_compaction_beside_writers_loses_no_tally(harness: Harness) -> None:
    b = harness.backend
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for _ in range(8):
                b.transact(lambda tx: tx.add_tallies([_t(M), _t(M + 1, owner="agent")]))
        except BaseException as exc:
            errors.append(exc)

    def compactor() -> None:
        try:
            while not done.is_set():
                b.compact_tallies(M + 2)
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer) for _ in range(2)]
    squeezer = threading.Thread(target=compactor)
    squeezer.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    squeezer.join()
    assert errors == []
    b.compact_tallies(M + 2)
    assert b.read_tallies(M, M + 2) == [
        Tally(M, "", "succeeded", 3, 16), Tally(M + 1, "", "succeeded", 3, 16),
    ]  # fmt: skip
