"""What the queue documents forbid, the stand-in refuses: UPDATE on a queue
(queues-examples, the heartbeat pattern) and a RECEIVE in a stale read
(queues-using); and it takes RENEWLEASE only as the documents send it, in a
single-use read. The error codes are the stand-in's: the documents give none
(the live suite records a real instance's)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from google.api_core import exceptions as gexc

from agentq import FakeClock, open_backend
from agentq.backends.spanner import SpannerBackend
from agentq.spec import QueueSpec

from .fixtures import EmulatorDatabase

JOBS = QueueSpec.simple("Jobs")


@pytest.fixture
def jobs(emulator_database: EmulatorDatabase) -> Iterator[SpannerBackend]:
    clock = FakeClock()
    emulator_database.use_clock(clock)
    b = open_backend(emulator_database.url, clock=clock)
    assert isinstance(b, SpannerBackend)
    b.create_queue(JOBS)
    b.transact(lambda tx: tx.send("Jobs", "m1", b"x"))
    yield b
    b.close()


def test_update_on_a_queue_is_refused(jobs: SpannerBackend) -> None:
    column = "payload" if jobs.dialect.postgres else "Payload"
    value = "CAST('eQ==' AS bytea)" if jobs.dialect.postgres else "b'y'"
    sql = f"UPDATE {jobs.dialect.queue_ident('Jobs')} SET {column} = {value} WHERE true"
    with pytest.raises(gexc.InvalidArgument, match="UPDATE is not supported on queue"):
        jobs.database.run_in_transaction(lambda txn: txn.execute_update(sql))


def test_receive_in_a_stale_read_and_renew_in_a_transaction_are_refused(
    jobs: SpannerBackend,
) -> None:
    d = jobs.dialect
    with (
        pytest.raises(gexc.InvalidArgument, match="strong read"),
        jobs.database.snapshot(exact_staleness=timedelta(seconds=5)) as snap,
    ):
        list(snap.execute_sql(d.receive_sql(JOBS, 1, "1m")))
    [[message]] = list(jobs.stream("Jobs", 1, 0))
    from google.cloud.spanner_v1 import param_types

    params = d.param_dict(["tokens"], [[message.lease_token]])
    types = {d.param_keys(["tokens"])[0]: param_types.Array(param_types.STRING)}
    with pytest.raises(gexc.InvalidArgument, match="single-use read"):
        jobs.database.run_in_transaction(
            lambda txn: list(txn.execute_sql(d.renew_sql("Jobs"), params=params, param_types=types))
        )
