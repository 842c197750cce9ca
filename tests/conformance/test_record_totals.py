"""``Backend.record_count`` and ``Backend.message_keys`` (issue 38 item 1): what
the operator's overview counts from instead of reading the ledger. The totals
follow inserts, puts over an existing record (not counted twice), inserts
refused as duplicates, deletes one by one and in sets, and a transaction rolled
back; the message keys are a queue's messages, leased or not."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agentq.spec import QueueSpec

from .conftest import Harness


@pytest.mark.needs("state")
def test_record_count_follows_inserts_and_deletes(harness: Harness) -> None:
    b = harness.backend
    assert b.record_count("tasks") == 0
    b.transact(lambda tx: [tx.put_record("tasks", f"t{i}", {"status": "queued"}) for i in range(5)])
    b.transact(lambda tx: [tx.put_record("tasks", f"t{i}", {"status": "succeeded"})
                           for i in range(3)])  # fmt: skip
    b.transact(lambda tx: tx.insert_record("tasks", "t1", {"status": "queued"}))
    b.transact(lambda tx: tx.insert_record("tasks", "t9", {"status": "queued"}))
    b.transact(lambda tx: tx.put_record("dead_letters", "d1", {"task_id": "t0"}))
    b.transact(lambda tx: tx.put_record("other", "o1", {}))
    assert (b.record_count("tasks"), b.record_count("dead_letters")) == (6, 1)

    def undone(tx: Any) -> None:
        tx.put_record("tasks", "t7", {})
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        b.transact(undone)
    b.transact(lambda tx: tx.delete_record("tasks", "t0"))
    b.transact(lambda tx: tx.delete_records("tasks", ["t1", "t2", "missing"]))
    b.transact(lambda tx: tx.delete_record("dead_letters", "d1"))
    assert (b.record_count("tasks"), b.record_count("dead_letters")) == (3, 0)
    with pytest.raises(ValueError, match="not counted"):
        b.record_count("other")


@pytest.mark.needs("state")
def test_message_keys_are_the_queues_messages(harness: Harness) -> None:
    b = harness.backend
    spec = QueueSpec.simple(harness.table("keys"))
    b.create_queue(spec)
    assert b.message_keys(spec.name) == []
    b.transact(lambda tx: [tx.send(spec.name, (f"m{i}",), b"x") for i in range(3)])
    assert sorted(b.message_keys(spec.name)) == [("m0",), ("m1",), ("m2",)]
    b.transact(lambda tx: tx.ack(spec.name, ("m1",)))
    assert sorted(b.message_keys(spec.name)) == [("m0",), ("m2",)]


@pytest.mark.needs("state")
def test_message_count_counts_no_further_than_asked(harness: Harness) -> None:
    b = harness.backend
    spec = QueueSpec.simple(harness.table("count"))
    b.create_queue(spec)
    assert b.message_count(spec.name, at_most=10) == 0
    b.transact(lambda tx: [tx.send(spec.name, (f"m{i}",), b"x") for i in range(5)])
    later = harness.clock.now() + timedelta(hours=1)
    b.transact(lambda tx: tx.send(spec.name, ("later",), b"x", later))
    assert b.message_count(spec.name, at_most=10) == 6  # ready and scheduled alike
    assert [b.message_count(spec.name, at_most=n) for n in (0, 1, 4, 6, 7)] == [0, 1, 4, 6, 6]
    assert b.message_count(spec.name, at_most=-3) == 0
    leased = next(iter(b.stream(spec.name, 2)))
    assert leased  # a batch of one or two (the Spanner stand-in picks)
    assert b.message_count(spec.name, at_most=100) == 6  # leased ones still count
    b.transact(lambda tx: tx.ack(spec.name, ("m1",)))
    assert b.message_count(spec.name, at_most=100) == 5


@pytest.mark.needs("state")
def test_delivered_message_keys_are_those_leased_at_least_once(harness: Harness) -> None:
    """``message_keys(delivered=True)``: the messages leased at least once, their
    lease expired or not (a task can be running only then), never one still
    waiting for its first delivery; Spanner, whose queues keep their leases to
    themselves, returns every key. (A live run on the emulator found the first
    version's message scheduled an hour ahead of the test's fake clock leased:
    the live backend keeps the real clock.)"""
    b = harness.backend
    spec = QueueSpec.simple(harness.table("delivered"))
    b.create_queue(spec)
    # (Ready now on every clock: a live run's backend keeps the real one.)
    b.transact(lambda tx: [tx.send(spec.name, (f"m{i}",), b"x") for i in range(5)])
    every = {(f"m{i}",) for i in range(5)}
    spanner = harness.kind.startswith("spanner")
    assert set(b.message_keys(spec.name, delivered=True)) == (every if spanner else set())
    assert b.message_count(spec.name, at_most=10, delivered=True) == (5 if spanner else 0)
    leased = {tuple(m.key) for m in next(iter(b.stream(spec.name, 2)))}
    assert leased and leased <= every
    delivered = set(b.message_keys(spec.name, delivered=True))
    assert delivered == (every if spanner else leased)
    assert [b.message_count(spec.name, at_most=n, delivered=True) for n in (0, 1, 10)] == (
        [0, 1, 5] if spanner else [0, 1, len(leased)]
    )
    harness.clock.advance(timedelta(minutes=30))  # the leases expired: still delivered
    assert set(b.message_keys(spec.name, delivered=True)) == delivered
    gone = sorted(leased)[0]
    b.transact(lambda tx: tx.ack(spec.name, gone))
    assert set(b.message_keys(spec.name, delivered=True)) == delivered - {gone}
    assert set(b.message_keys(spec.name)) == every - {gone}
