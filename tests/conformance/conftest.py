"""Backends the conformance suite runs against, and what each can show here.

Every backend in ``BACKENDS`` gets the same tests. A test declares what it
needs with ``@pytest.mark.needs(...)``; a backend lacking a capability skips
that test with the precise reason below, so the report says exactly what was
not verified where:

* ``sqlite-file``, ``sqlite-memory``: everything.
* ``spanner-mock``: the Spanner backend against google-cloud-spanner's gRPC mock.
  The mock stores no messages, so only what the client decides on its own is
  checked here (validation, identifiers, specs, error paths); the wire-level
  behaviour is covered in ``tests/spanner``.
* ``spanner-emulator-googlesql``, ``spanner-emulator-postgresql``: the Spanner
  backend over real gRPC on the Cloud Spanner emulator, one fresh database per
  test, through the queue interposer of ``tests/spanner_emulator`` (the
  emulator has no queues yet). Tables, DML, queries, locks, aborts and error
  codes are the emulator's; leases and delivery are the interposer's model,
  run on the test's FakeClock as if it were Spanner's clock.
* ``postgres``: the PostgreSQL backend on a real server (``AGENTQ_TEST_POSTGRES_URL``,
  see ``tests/postgres/server.py``), one fresh database per test; skipped
  locally without a server, a failure under ``CI``. Time is the client's
  clock (as on SQLite), so fake-time tests run there too.
* ``postgres-pgbouncer`` (only with ``AGENTQ_TEST_PGBOUNCER_CONFORMANCE`` set):
  the same, through a real PgBouncer in transaction pooling mode with
  ``pooler=transaction`` (no ``LISTEN``: receivers poll; no prepared statements).
* ``spanner-live-googlesql``, ``spanner-live-postgresql``: the live mode, run by
  ``python -m tests.spanner_live`` against a real Enterprise instance (or, in CI,
  the emulator and the stand-in the same way): fresh databases made for the run,
  each test with names of its own in them (``tests/spanner_live/harness.py``);
  skipped otherwise. Spanner's clock cannot be faked, so fake-time tests skip
  there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Backend, open_backend
from agentq.clock import FakeClock, SystemClock

REASONS = {
    "state": "the gRPC mock stores no messages: needs a real Spanner database "
    "(python -m tests.spanner_live)",
    "fake_time": "leases, delivery times and backoff run on Spanner's own clock, "
    "which a test cannot advance",
    "sqlite_sql": "the test's application SQL is SQLite's (tables created inside a transaction)",
    "app_sql": "needs application tables (created by the harness) beside the queues",
    "queue_metrics": "Spanner reports leased, backing-off, expired and TTL-dropped messages "
    "as Cloud Monitoring metrics, not through SQL (QueueStats has None there)",
    "exact_ack_result": "Spanner's Ack mutation is blind: it cannot report whether a message "
    "existed when ignore_not_found is set",
    "threads": "needs several backend objects on one database",
    "client_wait": "the test sees the receiver wait through the FakeClock's sleepers; a Spanner "
    "RECEIVE waits on the server, out of the client clock's sight",
    "untyped_keys": "the engine keeps each key column's type: no row can hold a key of the "
    "wrong type, so there is none to remove (ack_stored is a plain ack there)",
    "ordered_delivery": "Spanner's documents promise no delivery order (the stand-in draws one)",
    "full_batches": "Spanner's documents promise batches of at most max_batch_size, grouped by "
    "split, not full ones (the stand-in draws their sizes)",
}

_SQLITE = {"state", "fake_time", "sqlite_sql", "app_sql", "queue_metrics", "exact_ack_result",
           "threads", "client_wait", "untyped_keys", "ordered_delivery",
           "full_batches"}  # fmt: skip
_EMULATOR = {"state", "fake_time", "app_sql", "threads"}
# The one sqlite_sql test's SQL (CREATE TABLE inside a transaction) is PostgreSQL's too.
_POSTGRES = {"state", "fake_time", "sqlite_sql", "app_sql", "queue_metrics", "exact_ack_result",
             "threads", "client_wait", "ordered_delivery", "full_batches"}  # fmt: skip
CAPABILITIES = {
    "sqlite-file": _SQLITE,
    "sqlite-memory": _SQLITE,
    "spanner-mock": set(),
    "spanner-emulator-googlesql": _EMULATOR,
    "spanner-emulator-postgresql": _EMULATOR,
    "postgres": _POSTGRES,
    "spanner-live-googlesql": {"state", "app_sql", "threads"},
    "spanner-live-postgresql": {"state", "app_sql", "threads"},
}


@dataclass
class Harness:
    backend: Backend
    clock: FakeClock
    url: str
    kind: str
    capabilities: set[str] = field(default_factory=set)
    #: Application tables' prefix: the test's own names in a live run's database.
    table_prefix: str = ""
    #: Application tables made by :meth:`create_table` (a live run drops them).
    tables: list[str] = field(default_factory=list)

    def table(self, name: str) -> str:
        """The name of the test's application table ``name``."""
        return self.table_prefix + name

    def reopen(self) -> Backend:
        """Another backend object on the same database (another 'worker').

        An in-memory database cannot be opened twice, so there the 'other worker'
        shares the backend object (and closing it is a no-op).
        """
        if self.kind == "sqlite-memory":
            return _Shared(self.backend)  # type: ignore[return-value]
        if not self.kind.startswith("spanner"):
            return open_backend(self.url, clock=self.clock)
        # Spanner keeps no queue specs: every worker declares its queues. The schema
        # is there already (the emulator refuses DDL beside a running transaction).
        clock = SystemClock() if self.kind.startswith("spanner-live") else self.clock
        # (ddl=auto may come first in the query: the live suite's URLs put it there.)
        other = open_backend(self.url.replace("ddl=auto", "ddl=manual"), clock=clock)
        for name in self.backend.queues():
            other.create_queue(self.backend.queue_spec(name))
        return other

    @property
    def postgres(self) -> bool:
        return self.kind.endswith("postgresql") or "dialect=postgresql" in self.url

    def create_table(self, sqlite: str, googlesql: str, postgresql: str, name: str) -> None:
        """The application table ``name`` (``{t}`` in the statements):
        SQLite and PostgreSQL create it in a transaction, Spanner by DDL."""
        table = self.table(name)
        self.tables.append(table)
        sqlite, googlesql, postgresql = (
            sql.format(t=table) for sql in (sqlite, googlesql, postgresql)
        )
        if self.kind.startswith("sqlite"):
            self.backend.transact(lambda tx: tx.execute(sqlite))
            return
        if self.kind.startswith("postgres"):  # DDL is transactional there
            self.backend.transact(lambda tx: tx.execute(postgresql))
            return
        statement = postgresql if self.postgres else googlesql
        self.backend.database.update_ddl([statement]).result(60)  # type: ignore[attr-defined]


class _Shared:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def close(self) -> None:
        pass


#: Set (``.ci/run`` does, in a step of its own, to keep the README's test command
#: short): the suite runs once more on PostgreSQL through a real PgBouncer in
#: transaction pooling mode (``pooler=transaction``, tests/postgres/pgbouncer.py).
PGBOUNCER_ENV = "AGENTQ_TEST_PGBOUNCER_CONFORMANCE"
if os.environ.get(PGBOUNCER_ENV):
    CAPABILITIES["postgres-pgbouncer"] = _POSTGRES

BACKENDS = list(CAPABILITIES)

#: Spanner backend defects the emulator runs found, still open (see
#: /work/wt/spanner-findings.md): test name -> (backend kinds, finding).
#: Strict, so a fix turns the test green only once its entry is removed.
OPEN_FINDINGS: dict[str, tuple[tuple[str, ...], str]] = {
    # F1 and F2 fixed in spanner-backend a67cdb6.
}


@pytest.fixture(scope="session")
def spanner_mock_port() -> Iterator[int]:
    pytest.importorskip("google.cloud.spanner")
    from tests.spanner.mock_server import start_server

    _svc, _adm, server, port = start_server()
    yield port
    server.stop(grace=None)


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    kind = request.param
    capabilities = CAPABILITIES[kind]
    marker = request.node.get_closest_marker("needs")
    needed = set(marker.args) if marker else {"state", "fake_time", "sqlite_sql"}
    missing = sorted(needed - capabilities)
    if missing:
        pytest.skip(f"{kind}: " + "; ".join(REASONS[m] for m in missing))
    finding = OPEN_FINDINGS.get(request.node.originalname)
    if finding and kind in finding[0]:
        request.applymarker(pytest.mark.xfail(strict=True, reason=finding[1]))
    clock = FakeClock()
    if kind.startswith("spanner-emulator"):
        # Start at the real time, so that the emulator's CURRENT_TIMESTAMP (in the
        # statistics SQL) and the queues' clock agree until the test moves time.
        clock = FakeClock(datetime.now(UTC))
        database = request.getfixturevalue("emulator_database_factory")(kind.endswith("postgresql"))
        database.use_clock(clock)  # the stand-in's queues run on the test's clock
        backend = open_backend(database.url, clock=clock)
        backend.apply_ddl([])  # type: ignore[attr-defined]  # the records table
        yield Harness(backend, clock, database.url, kind, capabilities)
        backend.close()
        return
    if kind.startswith("spanner-live"):
        from tests.spanner_live.harness import drop_test_objects, live_database

        live = live_database(kind, request.node.nodeid)
        backend = open_backend(live.url, clock=SystemClock())
        backend.apply_ddl([])  # type: ignore[attr-defined]  # the records table
        h = Harness(backend, clock, live.url, kind, capabilities, table_prefix=live.namespace)
        yield h
        backend.close()
        drop_test_objects(live, h.tables)
        return
    if kind == "sqlite-file":
        url = f"sqlite:///{tmp_path / 'queue.db'}"
    elif kind == "sqlite-memory":
        url = "sqlite:///:memory:"
    elif kind == "postgres":
        url = request.getfixturevalue("postgres_url")
    elif kind == "postgres-pgbouncer":
        url = request.getfixturevalue("pgbouncer_url") + "?pooler=transaction"
    elif kind == "spanner-mock":
        port = request.getfixturevalue("spanner_mock_port")
        url = f"spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:{port}"
    else:
        raise AssertionError(f"unknown backend kind {kind}")
    backend = open_backend(url, clock=clock)
    yield Harness(backend, clock, url, kind, capabilities)
    backend.close()
