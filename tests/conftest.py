"""Fixtures shared by several suites: the Cloud Spanner emulator (see
``tests/spanner_emulator``) for the conformance, runtime and emulator tests, a
fresh database on a real PostgreSQL server (``tests/postgres/server.py``), also
through a real PgBouncer (``tests/postgres/pgbouncer.py``), and a loopback port
held for a server the test starts in another process."""

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentq import open_backend
from agentq.backends import Backend
from tests.ports import held_port
from tests.postgres.pgbouncer import pgbouncer, pgbouncer_url
from tests.postgres.server import postgres_url, postgres_url_factory
from tests.spanner_emulator.choices import SEED_VARIABLE, run_seed
from tests.spanner_emulator.fixtures import (
    EmulatorDatabase,
    emulator_database,
    emulator_database_factory,
    spanner_emulator,
)

__all__ = [
    "emulator_database",
    "emulator_database_factory",
    "pgbouncer",
    "pgbouncer_url",
    "postgres_url",
    "postgres_url_factory",
    "records_backend",
    "server_port",
    "spanner_emulator",
]


@pytest.fixture
def records_backend(emulator_database: EmulatorDatabase) -> Iterator[Backend]:
    """A Spanner backend on a fresh emulator database with the records table
    only (no queue: opened without the queue stand-in, which imports no agentq
    module, so this lives here)."""
    b = open_backend(emulator_database.direct_url)
    b.apply_ddl([])  # type: ignore[attr-defined]
    yield b
    b.close()


@pytest.fixture
def server_port() -> Iterator[int]:
    """A free loopback port no other test process can take during the test (see
    :mod:`tests.ports`), for a server the test starts, and restarts, on it."""
    with held_port() as port:
        yield port


#: The time-sensitive tests: schedules and cron, retention, approval timers and
#: reminders, batching windows, rate limits, ordering, retries and Retry-After.
#: `.ci/run` runs them again (SQLite cases) with the process clock moved by
#: libfaketime to the calendar's edges: year ends, leap days, daylight-saving
#: changes, past 2038-01-19T03:14:07Z.
CALENDAR_MODULES = {
    "unit/test_schedule_rules.py",
    "unit/test_retention_settings.py",
    "unit/test_ratelimit.py",
    "unit/test_http.py",
    "unit/test_policy_limits.py",
    "runtime/test_schedules.py",
    "runtime/test_retention.py",
    "runtime/test_retention_records.py",
    "runtime/test_approval_timers.py",
    "runtime/test_batching.py",
    "runtime/test_rate_limits.py",
    "runtime/test_joins.py",
    "runtime/test_retry_after_cap.py",
}


def pytest_configure(config: pytest.Config) -> None:
    # The Spanner stand-in draws what the queue documents leave open from one seed
    # per run (tests/spanner_emulator/choices.py): chosen here, before pytest-xdist
    # starts its workers, so that they inherit it.
    run_seed()
    if os.environ.get("AGENTQ_SPANNER_LIVE"):
        # The live mode (python -m tests.spanner_live) closes a Spanner client per
        # test: Database.close() joins a maintenance thread that sleeps in
        # 10-minute chunks, and the backend waits 2 s for it.
        from datetime import timedelta

        from google.cloud.spanner_v1.database_sessions_manager import DatabaseSessionsManager

        DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = timedelta(milliseconds=50)


def pytest_report_header(config: pytest.Config) -> str:
    return f"spanner stand-in seed: {SEED_VARIABLE}={run_seed()}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"spanner stand-in seed: {SEED_VARIABLE}={run_seed()} (set it to repeat this run's "
        "choices: batch shapes, delivery order, backoff)"
    )


#: Set by .ci/run for its step that runs the tests marked ``ci_step``: long proofs
#: (bounded chaos runs, the schemathesis fuzz) kept out of the README's command so
#: that it stays within its 10 minutes; CI runs every one of them.
CI_STEPS_VARIABLE = "AGENTQ_CI_STEPS"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = __file__.rsplit("/", 1)[0]
    in_ci_step = bool(os.environ.get(CI_STEPS_VARIABLE))
    for item in items:
        rel = str(item.path).removeprefix(root + "/")
        if rel in CALENDAR_MODULES:
            item.add_marker(pytest.mark.calendar)
        if not in_ci_step and item.get_closest_marker("ci_step") is not None:
            item.add_marker(pytest.mark.skip(
                reason=f"a step of .ci/run of its own: {CI_STEPS_VARIABLE}=1 runs it"
            ))  # fmt: skip


if os.environ.get("AGENTQ_UNDER_FAKETIME"):
    # .ci/calendar-edges moves the wall clock with libfaketime and keeps the
    # monotonic one real; libfaketime 0.9.10 then answers EINVAL to the absolute
    # clock_nanosleep behind time.sleep. A timed wait sleeps as long, and works.
    def _sleep(seconds: float) -> None:
        threading.Event().wait(max(seconds, 0.0))

    time.sleep = _sleep
