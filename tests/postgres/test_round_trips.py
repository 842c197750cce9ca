"""Round trips to the server per transaction, counted in libpq's trace of the
backend's connection (each ``Sync`` or simple ``Query`` waits for the server).

On a busy machine a round trip costs about as much as a commit's WAL flush, so
these counts are what the pipelining of :mod:`agentq.backends.postgres.pipeline`
is for: a decision that enqueues a task is one round trip (``BEGIN``, the
ledger record, the message, the ``NOTIFY`` and ``COMMIT`` together), as
pgqueuer's single-statement enqueue is. Counts, never times.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from psycopg import pq  # noqa: E402

from agentq.backends import Transaction, open_backend  # noqa: E402
from agentq.backends.postgres import PostgresBackend  # noqa: E402
from agentq.spec import QueueSpec  # noqa: E402

# A message the client sends that the server answers before the client goes on.
_WAITS = re.compile(r"^F\t\d+\t(Sync|Query)\b\t?(.*)$")


class Traced:
    """The backend (one pooled connection) and libpq's trace of that connection."""

    def __init__(self, backend: PostgresBackend, trace: Path) -> None:
        self.backend = backend
        self._trace = trace
        self._file = trace.open("w")
        with backend._db._pool.connection() as conn:
            conn.pgconn.trace(self._file.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def round_trips(self, fn: Callable[[PostgresBackend], Any]) -> int:
        self._file.flush()
        start = self._trace.stat().st_size
        fn(self.backend)
        self._file.flush()
        with self._trace.open() as fh:
            fh.seek(start)
            lines = fh.read().splitlines()
        waits = [m for m in (_WAITS.match(line) for line in lines) if m is not None]
        # The pool's liveness check of a connection idle for a while (an empty
        # query) is not the transaction's.
        return sum(1 for m in waits if not (m.group(1) == "Query" and m.group(2) == '""'))

    def close(self) -> None:
        self.backend.close()
        self._file.close()


@pytest.fixture
def traced(postgres_url: str, tmp_path: Path) -> Iterator[Traced]:
    backend = open_backend(postgres_url + "?pool_size=1")
    assert isinstance(backend, PostgresBackend)
    backend.create_queue(QueueSpec.simple("Jobs"))
    t = Traced(backend, tmp_path / "libpq.trace")
    try:
        yield t
    finally:
        t.close()


def test_an_enqueue_is_one_round_trip(traced: Traced) -> None:
    def enqueue(tx: Transaction) -> None:
        tx.put_record("ledger", "t1", {"status": "queued"})
        tx.send("Jobs", "t1", b"x")

    assert traced.round_trips(lambda b: b.transact(enqueue)) == 1
    assert [m.key for batch in traced.backend.stream("Jobs", 10) for m in batch] == [("t1",)]


def test_a_decision_with_the_applications_sql_is_two(traced: Traced) -> None:
    def decide(tx: Transaction) -> None:
        tx.execute("SELECT %s", (1,))  # its rows are read: the first round trip
        tx.put_record("ledger", "t2", {"status": "queued"})
        tx.send("Jobs", "t2", b"x")

    assert traced.round_trips(lambda b: b.transact(decide)) == 2


def test_a_lease_is_two_round_trips_and_an_idle_transaction_none(traced: Traced) -> None:
    traced.backend.transact(lambda tx: [tx.send("Jobs", f"m{i}", b"x") for i in range(5)])
    batches: list[Any] = []
    # The ready rows (with BEGIN), then their leases' update with the COMMIT.
    assert (
        traced.round_trips(lambda b: batches.append(b._leases.lease(b._queue_sql("Jobs"), 5))) == 2
    )
    assert len(batches[0][0]) == 5
    assert traced.round_trips(lambda b: b.transact(lambda tx: None)) == 0


def test_an_empty_one_shot_receive_is_two_round_trips(traced: Traced) -> None:
    # The select (with BEGIN) and the COMMIT: a one-shot receive (drain, every
    # idle queue each round) waits for nothing, so it reads no next visible time.
    assert traced.round_trips(lambda b: list(b.stream("Jobs", max_batch_size=8))) == 2
