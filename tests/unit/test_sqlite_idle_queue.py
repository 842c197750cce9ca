"""An idle SQLite queue is checked with a read: its receivers, woken by every
commit to the file, must not take the write lock each time they find nothing."""

from __future__ import annotations

from pathlib import Path

from agentq.backends import Transaction
from agentq.backends.sqlite import SQLiteBackend
from agentq.spec import QueueSpec


def _lease(backend: SQLiteBackend, queue: str) -> list[object]:
    return [m for batch in backend.stream(queue, max_batch_size=10) for m in batch]


def test_an_idle_queue_is_leased_without_a_write_transaction_until_a_message_is_ready(
    tmp_path: Path,
) -> None:
    backend = SQLiteBackend(str(tmp_path / "idle.db"))
    try:
        backend.create_queue(QueueSpec.simple("quiet"))
        statements: list[str] = []
        backend._db._conn.set_trace_callback(statements.append)
        assert _lease(backend, "quiet") == []  # the first look writes, as before
        assert any(s.startswith("BEGIN IMMEDIATE") for s in statements)
        statements.clear()
        assert _lease(backend, "quiet") == []
        assert _lease(backend, "quiet") == []
        assert not any(s.startswith("BEGIN") for s in statements), statements

        def send(tx: Transaction) -> None:
            tx.send("quiet", "m1", b"hello")

        backend.transact(send)
        statements.clear()
        leased = _lease(backend, "quiet")
        assert [m.key for m in leased] == [("m1",)]  # type: ignore[attr-defined]
        assert any(s.startswith("BEGIN IMMEDIATE") for s in statements)
        assert _lease(backend, "quiet") == []  # leased: not ready again
    finally:
        backend.close()
