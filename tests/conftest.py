"""Fixtures shared by several suites: the Cloud Spanner emulator (see
``tests/spanner_emulator``) for the conformance, runtime and emulator tests, a
fresh database on a real PostgreSQL server (``tests/postgres/server.py``), and
a loopback port held for a server the test starts in another process."""

from collections.abc import Iterator

import pytest

from tests.ports import held_port
from tests.postgres.server import postgres_url, postgres_url_factory
from tests.spanner_emulator.fixtures import (
    emulator_database,
    emulator_database_factory,
    spanner_emulator,
)

__all__ = [
    "emulator_database",
    "emulator_database_factory",
    "postgres_url",
    "postgres_url_factory",
    "server_port",
    "spanner_emulator",
]


@pytest.fixture
def server_port() -> Iterator[int]:
    """A free loopback port no other test process can take during the test (see
    :mod:`tests.ports`), for a server the test starts, and restarts, on it."""
    with held_port() as port:
        yield port
