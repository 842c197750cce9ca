"""The SQL a Spanner backend's snapshot reads send (to see which index a
listing walks), shared by the tests of the records' indexes."""

from __future__ import annotations

from typing import Any

import pytest


def recording(b: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of the backend's snapshot reads, from now on."""
    sent: list[str] = []
    real = b.database.snapshot

    class Recording:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __enter__(self) -> Recording:
            self._snap = self._inner.__enter__()
            return self

        def __exit__(self, *exc: Any) -> Any:
            return self._inner.__exit__(*exc)

        def execute_sql(self, sql: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(sql)
            return self._snap.execute_sql(sql, *args, **kwargs)

    monkeypatch.setattr(b.database, "snapshot", lambda *a, **kw: Recording(real(*a, **kw)))
    return sent
