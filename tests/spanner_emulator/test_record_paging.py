"""Paged ``list_records`` reads one page per query, not the rest of the table
(issue 29, defect 4: 30 pages of 100 over 3,000 records read 46,530 rows).

The emulator runs the SQL (keyset condition, prefix range and LIMIT); the test
counts the rows each query of a page sent back to the client.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentq.backends import Backend

PAGE = 25


class _CountingSnapshot:
    """A snapshot whose queries count the rows they return."""

    def __init__(self, inner: Any, counts: list[int]) -> None:
        self._inner, self._counts = inner, counts
        self._snap: Any = None

    def __enter__(self) -> _CountingSnapshot:
        self._snap = self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)

    def execute_sql(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self._counts.append(0)
        for row in self._snap.execute_sql(*args, **kwargs):
            self._counts[-1] += 1
            yield row



def test_each_page_reads_at_most_a_page_of_rows(
    records_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = records_backend
    keys = [f"task:{i:04d}" for i in range(100)] + [f"zother:{i:03d}" for i in range(50)]
    b.transact(lambda tx: [tx.put_record("things", k, {"k": k}) for k in keys])
    database: Any = b.database  # type: ignore[attr-defined]
    counts: list[int] = []
    real_snapshot = database.snapshot
    monkeypatch.setattr(
        database, "snapshot", lambda *a, **kw: _CountingSnapshot(real_snapshot(*a, **kw), counts)
    )
    seen: list[str] = []
    after = ""
    while True:
        page = b.list_records("things", "task:", limit=PAGE, after=after)
        if not page:
            break
        seen += [k for k, _ in page]
        after = page[-1][0]
    assert seen == keys[:100]  # every key of the prefix once, in order
    # Four full pages and the empty one that ends the listing; each query sent at
    # most a page (not the rest of the table: 150, 125, ... rows before).
    assert len(counts) == 5 and max(counts) <= PAGE, counts
    assert sum(counts) == 100, counts
    # Without a limit the whole prefix, and only the prefix, is read.
    counts.clear()
    assert [k for k, _ in b.list_records("things", "zother:")] == keys[100:]
    assert counts == [50]
