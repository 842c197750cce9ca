"""Records can be read a page at a time: ``list_records(after=last_key)`` goes on
where a page ended, so a listing of the ledger never has to load all of it."""

from __future__ import annotations

import pytest

from .conftest import Harness


@pytest.mark.needs("state")
def test_pages_of_records_follow_each_other_in_key_order(harness: Harness) -> None:
    b = harness.backend
    keys = [f"t{i:02d}" for i in range(7)]

    def fill(tx: object) -> None:
        for key in keys:
            tx.put_record("ledger", key, {"k": key})  # type: ignore[attr-defined]
        tx.put_record("other", "t99", {"k": "x"})  # type: ignore[attr-defined]

    b.transact(fill)
    seen: list[str] = []
    after = ""
    while True:
        page = b.list_records("ledger", limit=3, after=after)
        if not page:
            break
        assert len(page) <= 3
        seen += [k for k, _ in page]
        after = page[-1][0]
    assert seen == keys
    assert [k for k, _ in b.list_records("ledger", prefix="t0", after="t04")] == ["t05", "t06"]
    assert b.list_records("ledger", after="t06") == []
    assert b.list_records("ledger", after="\udcff") == []
