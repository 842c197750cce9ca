"""A row whose key has the wrong type leaves the queue (issue 27, item 16).

Another program can write anything into a SQLite queue table, a key of the
wrong type included; :meth:`~agentq.backends.Transaction.ack` refuses such a key
(it checks a key against the queue's key types), so the row was dead-lettered
again at every lease and never left. :meth:`~agentq.backends.Transaction.ack_stored`
deletes a message by its key exactly as stored, as a received message carries
it: on every backend it acks a leased message; only SQLite can hold a key of
the wrong type, and there it removes that row too.
"""

from __future__ import annotations

import pytest

from agentq.backends import Transaction
from agentq.clock import to_micros

from .conftest import Harness
from .test_queue_contract import receive, send, with_tasks_queue


@pytest.fixture
def q(harness: Harness) -> Harness:
    return with_tasks_queue(harness)


@pytest.mark.needs("state", "fake_time")
def test_ack_stored_removes_a_leased_message_by_its_key_as_received(q: Harness) -> None:
    send(q, (1, "a"), (2, "b"))
    first, second = receive(q)
    assert q.backend.transact(lambda tx: tx.ack_stored(first.queue, first.key))
    q.clock.advance(3600)  # past every lease: only what was not acked comes back
    assert [m.key for m in receive(q)] == [second.key]
    if "exact_ack_result" in q.capabilities:  # Spanner's blind Ack cannot tell
        assert q.backend.transact(lambda tx: tx.ack_stored(first.queue, first.key)) is False


@pytest.mark.needs("state", "fake_time", "untyped_keys")
def test_a_row_with_a_key_of_the_wrong_type_leaves_by_its_key_as_stored(q: Harness) -> None:
    now = to_micros(q.clock.now())

    def write_around_agentq(tx: Transaction) -> None:
        tx.execute(
            'INSERT INTO "Tasks" (user_id, msg_id, payload, deliver_time, agentq_visible_at, '
            "agentq_lease_seq) VALUES (?, ?, ?, ?, ?, 0)",
            ("seven", b"\x00\xff", b"junk", now, now),
        )

    q.backend.transact(write_around_agentq)
    send(q, (1, "good"))
    stray, good = sorted(receive(q), key=lambda m: m.key == (1, "good"))
    assert stray.key == ("seven", b"\x00\xff")  # text in an INTEGER column, a blob in TEXT
    assert q.backend.transact(lambda tx: tx.ack_stored(stray.queue, stray.key)) is True
    assert q.backend.transact(lambda tx: tx.ack(good.queue, good.key)) is True
    q.clock.advance(3600)
    assert receive(q) == []
    assert q.backend.stats("Tasks").depth == 0
