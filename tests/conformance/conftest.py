"""Backends the conformance suite runs against.

Every backend in ``BACKENDS`` gets the same tests. A backend that cannot show a
behaviour here (no live Spanner) marks that test precisely in ``LIMITS``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Backend, open_backend
from agentq.clock import FakeClock


@dataclass
class Harness:
    backend: Backend
    clock: FakeClock
    url: str
    kind: str

    def reopen(self) -> Backend:
        """Another backend object on the same database (another 'worker').

        An in-memory database cannot be opened twice, so there the 'other worker'
        shares the backend object (and closing it is a no-op).
        """
        if self.kind == "sqlite-memory":
            return _Shared(self.backend)  # type: ignore[return-value]
        return open_backend(self.url, clock=self.clock)


class _Shared:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def close(self) -> None:
        pass


BACKENDS = ["sqlite-file", "sqlite-memory"]


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    clock = FakeClock()
    kind = request.param
    if kind == "sqlite-file":
        url = f"sqlite:///{tmp_path / 'queue.db'}"
    else:
        url = "sqlite:///:memory:"
    backend = open_backend(url, clock=clock)
    yield Harness(backend, clock, url, kind)
    backend.close()
