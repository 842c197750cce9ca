"""Session fixtures: the emulator, the queue interposer in front of it, and a
fresh database per test (registered in ``tests/conftest.py`` for every suite).

Locally the tests skip with a reason when the emulator is not installed; in CI
(``CI`` set) its absence fails them, so a CI run cannot quietly test nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from .emulator import INSTANCE, PROJECT, Emulator, find_emulator
from .timekeeping import QueueClock

if TYPE_CHECKING:
    from .interposer import Interposer

#: Emulator 1.5.28 runs one read-write transaction at a time per multiplexed
#: session: a second one invalidates the first (FAILED_PRECONDITION "Invalid
#: transaction ID"), where Spanner runs them side by side. With regular
#: sessions for read-write transactions the emulator aborts one of two
#: concurrent transactions instead, as Spanner may, and the client re-runs it.
RW_SESSIONS = ("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW", "false")


@dataclass
class EmulatorEnv:
    emulator: Emulator
    interposer: Interposer

    def url(
        self,
        database_id: str,
        postgres: bool,
        *,
        through_interposer: bool = True,
        receive_short: str | None = None,
    ) -> str:
        endpoint = self.interposer.endpoint if through_interposer else self.emulator.endpoint
        options = "&dialect=postgresql" if postgres else ""
        if receive_short is not None:
            options += f"&receive_short={receive_short}"
            if receive_short == "0s":  # the stand-in refuses '0s' unless asked for it
                self.interposer.allow_zero_duration(database_id)
        return (
            f"spanner://projects/{PROJECT}/instances/{INSTANCE}/databases/{database_id}"
            f"?endpoint={endpoint}&ddl=auto{options}"
        )


@pytest.fixture(scope="session")
def spanner_emulator() -> Iterator[EmulatorEnv]:
    """The emulator on a free loopback port and the interposer in front of it."""
    pytest.importorskip("google.cloud.spanner")
    binary = find_emulator()
    if binary is None:
        message = (
            "the Cloud Spanner emulator is not installed (Debian package "
            "google-cloud-cli-spanner-emulator; or set SPANNER_EMULATOR_BINARY)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must run the Spanner emulator tests")
        pytest.skip(message)
    from google.cloud.spanner_v1.database_sessions_manager import DatabaseSessionsManager

    from .interposer import Interposer

    # Database.close() joins a maintenance thread that sleeps in 10-minute chunks;
    # the backend waits 2 s for it on close.
    polling = DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL
    DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = timedelta(milliseconds=50)
    emulator = Emulator(binary)
    emulator.start()
    interposer = Interposer(emulator.endpoint, emulator.client())
    try:
        yield EmulatorEnv(emulator, interposer)
    finally:
        interposer.stop()
        emulator.stop()
        DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = polling


@dataclass
class EmulatorDatabase:
    """One fresh database of one dialect for one test."""

    env: EmulatorEnv
    database_id: str
    postgres: bool

    @property
    def url(self) -> str:
        return self.env.url(self.database_id, self.postgres)

    def url_with(self, *, receive_short: str) -> str:
        """The URL with ``receive_short`` set (``0s``: the stand-in then takes '0s')."""
        return self.env.url(self.database_id, self.postgres, receive_short=receive_short)

    @property
    def direct_url(self) -> str:
        """The same database without the interposer (no queues there)."""
        return self.env.url(self.database_id, self.postgres, through_interposer=False)

    def use_clock(self, clock: QueueClock) -> None:
        self.env.interposer.use_clock(self.database_id, clock)

    def client_database(self) -> object:
        """A google-cloud-spanner Database on the emulator directly."""
        return self.env.emulator.database(self.database_id, self.postgres)


@pytest.fixture
def emulator_database_factory(
    spanner_emulator: EmulatorEnv, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Callable[[bool], EmulatorDatabase]]:
    monkeypatch.setenv(*RW_SESSIONS)
    made: list[str] = []

    def make(postgres: bool) -> EmulatorDatabase:
        database_id = spanner_emulator.emulator.create_database(postgres)
        made.append(database_id)
        # The stand-in's random choices for this database follow from the run's
        # seed and the test, whichever process runs it (see choices.py).
        spanner_emulator.interposer.label(database_id, f"{request.node.nodeid}#{len(made)}")
        return EmulatorDatabase(spanner_emulator, database_id, postgres)

    yield make
    for database_id in made:
        spanner_emulator.interposer.forget(database_id)
        spanner_emulator.emulator.drop_database(database_id)


@pytest.fixture(params=["googlesql", "postgresql"])
def emulator_database(
    request: pytest.FixtureRequest, emulator_database_factory: Callable[[bool], EmulatorDatabase]
) -> EmulatorDatabase:
    """A fresh database on the emulator, once per dialect."""
    return emulator_database_factory(request.param == "postgresql")
