"""The live questions' fixtures: a backend in the test's own namespace of the
run's database, per dialect (``spanner-live-googlesql``/``-postgresql``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq import open_backend
from agentq.backends.spanner import SpannerBackend
from agentq.clock import SystemClock
from agentq.spec import KeyColumn, KeyType, QueueSpec

from .harness import LiveDatabase, drop_test_objects, live_database

#: The queue most questions ask about: a documents-like shape.
PROBE = QueueSpec("Probe", (KeyColumn("UserId", KeyType.INT), KeyColumn("MessageId", KeyType.STR)))


@pytest.fixture(params=["spanner-live-googlesql", "spanner-live-postgresql"])
def live(request: pytest.FixtureRequest) -> Iterator[LiveDatabase]:
    """The test's share of the run's database (skips outside a live run)."""
    database = live_database(request.param, request.node.nodeid)
    tables: list[str] = []
    request.node.live_tables = tables  # what a question creates beside its queues
    yield database
    drop_test_objects(database, tables)


@pytest.fixture
def backend(live: LiveDatabase) -> Iterator[SpannerBackend]:
    """A backend on the real clock with the probe queue."""
    b = open_backend(live.url, clock=SystemClock())
    assert isinstance(b, SpannerBackend)
    b.create_queue(PROBE)
    yield b
    b.close()
