"""Fixtures of the emulator tests only (the session's emulator and databases
are registered for every suite in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq import open_backend
from agentq.backends import Backend

from .fixtures import EmulatorDatabase


@pytest.fixture
def records_backend(emulator_database: EmulatorDatabase) -> Iterator[Backend]:
    """A backend on a fresh emulator database with the records table only (no
    queue: opened without the queue stand-in)."""
    b = open_backend(emulator_database.direct_url)
    b.apply_ddl([])  # type: ignore[attr-defined]
    yield b
    b.close()
