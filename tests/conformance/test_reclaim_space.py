"""``reclaim_space`` (issue 14): every backend takes it after deletes, gives back
at most what it is asked for, and never loses a record that is still there."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Harness


@pytest.mark.needs("state")
def test_reclaiming_after_deletes_keeps_every_live_record(harness: Harness) -> None:
    b = harness.backend

    def fill(tx: Any) -> None:
        for i in range(60):
            tx.put_record("ledger", f"k{i:03d}", {"blob": "x" * 3000, "i": i})

    b.transact(fill)
    b.transact(lambda tx: [tx.delete_record("ledger", f"k{i:03d}") for i in range(0, 60, 2)])
    step = 64 * 1024
    freed = b.reclaim_space(step)
    assert 0 <= freed <= step
    if harness.kind == "sqlite-file":
        assert freed > 0  # a new file uses incremental auto-vacuum
    while b.reclaim_space(step):
        pass
    assert b.reclaim_space(0) == 0
    assert [k for k, _ in b.list_records("ledger")] == [f"k{i:03d}" for i in range(1, 60, 2)]
    assert b.get_record("ledger", "k059") == {"blob": "x" * 3000, "i": 59}


@pytest.mark.needs()
def test_reclaiming_nothing_or_on_an_empty_database_gives_back_nothing(harness: Harness) -> None:
    assert harness.backend.reclaim_space(0) == 0
    assert harness.backend.reclaim_space(-1) == 0
    assert 0 <= harness.backend.reclaim_space(1 << 20) <= 1 << 20
