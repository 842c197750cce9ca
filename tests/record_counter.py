"""A spy on a backend that counts the records its reads return: what a request
costs the database, without timing it (issue 27 item 12's listing tests)."""

from __future__ import annotations

from typing import Any


class RecordCounter:
    """Wraps a backend; counts the records each read returns."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.read = 0

    def list_records(self, *args: Any, **kwargs: Any) -> Any:
        rows = self._inner.list_records(*args, **kwargs)
        self.read += len(rows)
        return rows

    def read_records(self, *args: Any, **kwargs: Any) -> Any:
        rows = self._inner.read_records(*args, **kwargs)
        self.read += len(rows)
        return rows

    def get_record(self, *args: Any, **kwargs: Any) -> Any:
        row = self._inner.get_record(*args, **kwargs)
        self.read += row is not None
        return row

    def read_tallies(self, *args: Any, **kwargs: Any) -> Any:
        rows = self._inner.read_tallies(*args, **kwargs)  # rows, counted as records
        self.read += len(rows)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SQLiteSteps:
    """Counts the virtual-machine steps SQLite runs for the reads of a SQLite
    backend (its reader connection), in hundreds: what a query scans, also the
    rows it reads and drops (a filter no index serves), which a count of the
    records returned cannot see."""

    def __init__(self, backend: Any) -> None:
        self._conn = getattr(backend, "_inner", backend)._db._conn
        self.steps = 0

    def _step(self) -> int:
        self.steps += 1
        return 0

    def __enter__(self) -> SQLiteSteps:
        self._conn.set_progress_handler(self._step, 100)
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.set_progress_handler(None, 0)
