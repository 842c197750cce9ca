"""The fixes of issue 10 on a real engine: the Cloud Spanner emulator behind the
queue interposer (``tests/spanner_emulator``). Skips locally without the
emulator, fails in CI without it."""

from __future__ import annotations

from typing import Any

import pytest

from agentq import MessageNotFound, PayloadType, QueueSpec, TransactionError, open_backend
from agentq.backends.spanner import SpannerBackend

pytestmark = pytest.mark.slow
J = QueueSpec.simple("Jobs", payload=PayloadType.JSON)


def _open(db: Any) -> SpannerBackend:
    b = open_backend(db.url)
    assert isinstance(b, SpannerBackend)
    return b


def test_records_queues_stats_and_errors_on_the_emulator(emulator_database: Any) -> None:
    b = _open(emulator_database)
    try:
        b.create_queue(J)  # ddl=auto: applied and recorded
        b.transact(lambda tx: (tx.put_record("ledger", "a", {"n": 1}),
                               tx.send("Jobs", "j1", [1, 2, 3])))  # fmt: skip
        found = b.read_records("ledger", ["a", "missing", "task-\udcff"])
        assert set(found) == {"a"} and found["a"].value == {"n": 1}
        [[message]] = list(b.stream("Jobs", max_batch_size=1, max_duration=0))
        assert message.payload == [1, 2, 3]
        stats = b.stats("Jobs")
        assert stats.depth == 1 and (stats.oldest_unacked_age or 0.0) >= 0.0
        other = _open(emulator_database)
        try:
            assert "Jobs" in other.queues()  # declared in another process: from the database
        finally:
            other.close()
        with pytest.raises(TransactionError) as info:
            b.transact(lambda tx: tx.execute("SELECT 1/0"))
        assert not isinstance(info.value, MessageNotFound)
        b.transact(lambda tx: tx.ack("Jobs", "j1"))
        with pytest.raises(MessageNotFound):
            b.transact(lambda tx: tx.ack("Jobs", "j1"))
    finally:
        b.close()
