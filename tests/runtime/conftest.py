from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentq import FakeClock, Runtime
from agentq.demo_server import DemoAPI

ROOT = Path(__file__).resolve().parents[2]


#: The backends the runtime tests run on. The Spanner ones are the Spanner backend
#: over real gRPC on the Cloud Spanner emulator, one fresh database per test,
#: through the queue interposer of tests/spanner_emulator. ``postgresql`` is the
#: PostgreSQL backend on a real server (AGENTQ_TEST_POSTGRES_URL), a fresh database
#: per test (tests/postgres/server.py).
#: The runtime's tests on the emulator's PostgreSQL dialect are a step of .ci/run
#: of their own (``ci_step``): they were a seventh of the README's command's time
#: (288 of 2,197 worker-seconds), and the dialect is the backend's concern, which
#: the conformance suite checks on both dialects in the README's command.
RUNTIME_BACKENDS = [
    "sqlite",
    "postgresql",
    "spanner-emulator-googlesql",
    pytest.param("spanner-emulator-postgresql", marks=pytest.mark.ci_step),
    # The live mode (python -m tests.spanner_live): skipped otherwise.
    "spanner-live-googlesql",
    "spanner-live-postgresql",
]


#: How far past a lease's expiry a test moves the clock for the message to be
#: delivered again. The queue documents promise redelivery "with back-off within
#: the first hour", no figure for the first one; SQLite and PostgreSQL wait 1 s,
#: the Spanner stand-in draws at most about 10 s (tests/spanner_emulator/
#: choices.py), and what a real instance does is observed by the live suite
#: (tests/spanner_live). 30 s covers them and stays under the tools' 60 s
#: timeouts, which a test that holds a handler meanwhile must not reach.
REDELIVERED_WITHIN = 30.0


def runtime_clock(request: pytest.FixtureRequest, start: datetime | None = None) -> FakeClock:
    """A test's clock: fake (from ``start``), except in the live mode, where time
    is Spanner's and a test that moves or reads the clock itself is skipped when
    it tries (:class:`tests.spanner_live.harness.LiveClock`)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and str(callspec.params.get("backend_url", "")).startswith(
        "spanner-live"
    ):
        from tests.spanner_live.harness import LiveClock, skip_if_fake_time

        skip_if_fake_time(request.function)
        return LiveClock()  # type: ignore[return-value]
    return FakeClock() if start is None else FakeClock(start)


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> FakeClock:
    """The test's clock (see :func:`runtime_clock`)."""
    return runtime_clock(request)


_SQLITE_SQL = "the test's application SQL is SQLite's (tables created in a transaction, ? marks)"
_SQLITE_QUEUE_TABLE = "the test writes rows into the SQLite backend's own queue table by hand"
#: Runtime tests that cannot run on Spanner, and why.
NOT_ON_SPANNER = {
    "test_handler_state_writes_and_follow_ups_commit_with_the_result": _SQLITE_SQL,
    "test_failing_state_write_fails_the_attempt_and_records_nothing": _SQLITE_SQL,
    "test_decision_commits_state_and_task_together": _SQLITE_SQL,
    "test_rollback_leaves_neither_state_nor_task": _SQLITE_SQL,
    "test_invalid_arguments_name_the_field_and_commit_nothing": _SQLITE_SQL,
    "test_escalation_fires_and_a_late_approval_still_works": _SQLITE_SQL,
    "test_payload_that_is_not_json_goes_to_the_dead_letter_queue": _SQLITE_QUEUE_TABLE,
    "test_bad_rows_are_dead_lettered_as_strays_and_never_starve_the_good_task": _SQLITE_QUEUE_TABLE,
    "test_a_tasks_own_message_damaged_in_place_dead_letters_that_task": _SQLITE_QUEUE_TABLE,
    "test_a_corrupt_row_under_a_task_waiting_behind_its_ordering_key_is_a_stray": (
        _SQLITE_QUEUE_TABLE
    ),
    "test_sqlite_task_ids_follow_the_clock_so_one_burst_shares_pages": "SQLite's task ids",
    "test_claims_are_swapped_in_unless_the_record_changed_since_the_read": (
        "the read-then-swap claim is for single-writer backends; Spanner claims in the transaction"
    ),
    "test_lease_renewal_keeps_a_long_task_from_redelivery": (
        "it checks stats().ready == 0 while leased: Spanner's SQL cannot see leases, so ready "
        "counts leased messages (the no-redelivery half runs in the conformance suite)"
    ),
}
#: Runtime tests that cannot run on PostgreSQL, and why (each names what it lacks).
NOT_ON_POSTGRES = {
    "test_claims_are_swapped_in_unless_the_record_changed_since_the_read": (
        "PostgreSQL has no single writer, so no read-then-swap claim: it claims inside the "
        "transaction (test_backends_with_concurrent_writers_claim_inside_the_transaction)"
    ),
}


@pytest.fixture(params=RUNTIME_BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[str]:
    """Where the runtime under test keeps its state: a SQLite file, a fresh
    PostgreSQL database, a fresh emulator database whose queues run on the
    test's clock, or (live mode) the test's namespace in the run's database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'agentq.db'}"
        return
    name = request.node.originalname
    if request.param == "postgresql":
        if name in NOT_ON_POSTGRES:
            pytest.skip(f"postgresql: {NOT_ON_POSTGRES[name]}")
        yield str(request.getfixturevalue("postgres_url"))
        return
    if name in NOT_ON_SPANNER:
        pytest.skip(f"{request.param}: {NOT_ON_SPANNER[name]}")
    if request.param.startswith("spanner-live"):
        from tests.spanner_live.harness import drop_test_objects, live_database

        live = live_database(request.param, request.node.nodeid)
        yield live.url
        drop_test_objects(live, [])
        return
    factory = request.getfixturevalue("emulator_database_factory")
    database = factory(request.param.endswith("postgresql"))
    # The emulator's CURRENT_TIMESTAMP (statistics SQL) and the test's clock start together.
    clock.set(max(clock.now(), datetime.now(UTC)))
    database.use_clock(clock)
    yield str(database.url)


def queue_table(rt: Runtime, queue: str) -> str:
    """The table of ``queue`` as the application's SQL names it: PostgreSQL keeps
    the queue tables in agentq's schema, SQLite beside the application's."""
    schema = getattr(rt.backend, "schema", None)
    return f'"{schema}"."{queue}"' if schema else f'"{queue}"'


def types_key_columns(rt: Runtime) -> bool:
    """Whether the engine refuses a key of the wrong type in a queue table (a
    PostgreSQL ``bigint`` column refuses the text 'two'; SQLite stores it)."""
    return not rt.backend.url.startswith("sqlite")


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


def settings_for(api: DemoAPI) -> dict[str, str]:
    return {"payments_url": api.url, "notifications_url": api.url, "shipping_url": api.url}


@pytest.fixture
def rt(backend_url: str, clock: FakeClock, api: DemoAPI) -> Iterator[Runtime]:
    runtime = Runtime(
        backend_url,
        tools=ROOT / "tools",
        policies=ROOT / "policies",
        clock=clock,
        settings=settings_for(api),
    )
    yield runtime
    runtime.close()
