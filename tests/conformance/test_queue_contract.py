"""The queue contract (docs/explanations/architecture.md, "The queue backend contract"),
on every backend."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from agentq.backends import LEASE_SECONDS, Message, Transaction, encode_record
from agentq.errors import (
    DuplicateKey,
    InvalidIdentifier,
    InvalidMessage,
    MessageNotFound,
    PayloadTooLarge,
    QueueNotFound,
)
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec

from .conftest import Harness

TASKS = QueueSpec(
    "Tasks",
    (KeyColumn("user_id", KeyType.INT), KeyColumn("msg_id", KeyType.STR)),
)


def receive(h: Harness, queue: str = "Tasks", n: int = 100) -> list[Message]:
    """All messages one non-blocking receive returns, across batches."""
    out: list[Message] = []
    for batch in h.backend.stream(queue, max_batch_size=n, max_duration=0):
        out.extend(batch)
    return out


def send(h: Harness, *keys: tuple[Any, ...], payload: bytes = b"p", **kw: Any) -> None:
    def fn(tx: Transaction) -> None:
        for key in keys:
            tx.send("Tasks", key, payload, **kw)

    h.backend.transact(fn)


@pytest.fixture
def q(harness: Harness) -> Harness:
    return with_tasks_queue(harness)


def with_tasks_queue(harness: Harness) -> Harness:
    """The harness with the Tasks queue (and, where it can, an orders table)."""
    harness.backend.create_queue(TASKS)
    if "app_sql" in harness.capabilities:
        harness.create_table(
            sqlite="CREATE TABLE IF NOT EXISTS {t} (id INTEGER PRIMARY KEY, state TEXT)",
            googlesql="CREATE TABLE {t} (id INT64 NOT NULL, state STRING(MAX)) PRIMARY KEY (id)",
            postgresql="CREATE TABLE {t} (id bigint NOT NULL PRIMARY KEY, state varchar)",
            name="orders",
        )
    return harness


def orders(h: Harness) -> list[tuple[Any, ...]]:
    sql = f"SELECT id, state FROM {h.table('orders')} ORDER BY id"
    return h.backend.transact(lambda tx: tx.execute(sql))


@pytest.mark.needs("state", "fake_time")
def test_send_receive_ack(q: Harness) -> None:
    send(q, (1, "a"), payload=b"hello")
    [msg] = receive(q)
    assert msg.key == (1, "a")
    assert msg.payload == b"hello"
    assert msg.deliver_time == q.clock.now()
    assert msg.lease_expiry == q.clock.now() + timedelta(seconds=LEASE_SECONDS)
    assert msg.last_in_batch
    assert q.backend.transact(lambda tx: tx.ack("Tasks", msg.key)) is True
    q.clock.advance(3600)
    assert receive(q) == []
    assert q.backend.stats("Tasks").depth == 0


@pytest.mark.needs()
def test_create_queue_is_idempotent_but_rejects_a_changed_spec(q: Harness) -> None:
    q.backend.create_queue(TASKS)
    assert "Tasks" in q.backend.queues()
    changed = QueueSpec("Tasks", TASKS.key, payload=PayloadType.JSON)
    with pytest.raises(Exception, match="different spec"):
        q.backend.create_queue(changed)


@pytest.mark.needs("state", "app_sql")
def test_duplicate_key_fails_the_whole_transaction(q: Harness) -> None:
    send(q, (1, "a"))

    def fn(tx: Transaction) -> None:
        tx.execute(f"INSERT INTO {q.table('orders')} (id, state) VALUES (1, 'approved')")
        tx.send("Tasks", (1, "b"), b"x")
        tx.send("Tasks", (1, "a"), b"again")

    with pytest.raises(DuplicateKey, match="Tasks"):
        q.backend.transact(fn)
    assert orders(q) == []
    assert [m.key for m in receive(q)] == [(1, "a")]


@pytest.mark.needs("state", "app_sql")
def test_caught_duplicate_still_fails_the_transaction(q: Harness) -> None:
    send(q, (1, "a"))

    def fn(tx: Transaction) -> None:
        tx.execute(f"INSERT INTO {q.table('orders')} (id, state) VALUES (1, 'approved')")
        try:
            tx.send("Tasks", (1, "a"), b"again")
        except DuplicateKey:
            pass  # swallowing it must not let the transaction commit

    with pytest.raises(DuplicateKey):
        q.backend.transact(fn)
    assert orders(q) == []


@pytest.mark.needs("state", "app_sql")
def test_exception_in_fn_commits_neither_state_nor_message(q: Harness) -> None:
    def fn(tx: Transaction) -> None:
        tx.execute(f"INSERT INTO {q.table('orders')} (id, state) VALUES (7, 'approved')")
        tx.send("Tasks", (7, "refund"), b"x")
        raise RuntimeError("agent crashed mid-decision")

    with pytest.raises(RuntimeError):
        q.backend.transact(fn)
    assert orders(q) == []
    assert receive(q) == []


@pytest.mark.needs("state", "app_sql")
def test_state_and_message_commit_together(q: Harness) -> None:
    def fn(tx: Transaction) -> None:
        tx.execute(f"INSERT INTO {q.table('orders')} (id, state) VALUES (7, 'approved')")
        tx.send("Tasks", (7, "refund"), b"x")

    q.backend.transact(fn)
    assert orders(q) == [(7, "approved")]
    assert [m.key for m in receive(q)] == [(7, "refund")]


@pytest.mark.needs("state", "fake_time")
def test_scheduled_message_invisible_until_its_time(q: Harness) -> None:
    send(q, (1, "later"), deliver_time=q.clock.now() + timedelta(hours=72))
    assert receive(q) == []
    stats = q.backend.stats("Tasks")
    assert (stats.depth, stats.scheduled, stats.ready) == (1, 1, 0)
    q.clock.advance(timedelta(hours=72) - timedelta(seconds=1))
    assert receive(q) == []
    q.clock.advance(1)
    assert [m.key for m in receive(q)] == [(1, "later")]


@pytest.mark.needs("state", "fake_time")
def test_past_delivery_time_is_delivered_now(q: Harness) -> None:
    send(q, (1, "past"), deliver_time=q.clock.now() - timedelta(days=1))
    [msg] = receive(q)
    assert msg.deliver_time == q.clock.now()


@pytest.mark.needs("state", "fake_time", "app_sql")
def test_cancel_scheduled_message_by_ack(q: Harness) -> None:
    send(q, (1, "escalate"), deliver_time=q.clock.now() + timedelta(hours=72))

    def approve(tx: Transaction) -> None:
        tx.execute(f"INSERT INTO {q.table('orders')} (id, state) VALUES (1, 'approved')")
        tx.ack("Tasks", (1, "escalate"))

    q.backend.transact(approve)
    q.clock.advance(timedelta(hours=73))
    assert receive(q) == []
    assert orders(q) == [(1, "approved")]


@pytest.mark.needs("state", "fake_time")
def test_ack_then_send_same_key_in_one_transaction(q: Harness) -> None:
    """The heartbeat pattern: no UPDATE on queues, so ack + send (ack first)."""
    send(q, (1, "hb"), payload=b"v1", deliver_time=q.clock.now() + timedelta(seconds=30))

    def heartbeat(tx: Transaction) -> None:
        tx.ack("Tasks", (1, "hb"))
        tx.send("Tasks", (1, "hb"), b"v2", deliver_time=tx.now + timedelta(seconds=60))

    q.backend.transact(heartbeat)
    q.clock.advance(30)
    assert receive(q) == []
    q.clock.advance(30)
    [msg] = receive(q)
    assert msg.payload == b"v2"


@pytest.mark.needs("state")
def test_send_before_ack_of_same_key_is_a_duplicate(q: Harness) -> None:
    send(q, (1, "hb"))

    def wrong_order(tx: Transaction) -> None:
        tx.send("Tasks", (1, "hb"), b"v2")
        tx.ack("Tasks", (1, "hb"))

    with pytest.raises(DuplicateKey):
        q.backend.transact(wrong_order)


@pytest.mark.needs("state", "app_sql")
def test_stale_ack_fails_and_rolls_back_application_writes(q: Harness) -> None:
    send(q, (1, "a"))
    [msg] = receive(q)
    q.backend.transact(lambda tx: tx.ack("Tasks", msg.key))  # the other delivery won

    def stale_completion(tx: Transaction) -> None:
        table = q.table("orders")
        tx.execute(f"INSERT INTO {table} (id, state) VALUES (1, 'refunded by stale worker')")
        tx.ack("Tasks", msg.key, must_exist=True)

    with pytest.raises(MessageNotFound, match="already acknowledged"):
        q.backend.transact(stale_completion)
    assert orders(q) == []


@pytest.mark.needs("state", "app_sql")
def test_caught_missing_ack_still_rolls_back(q: Harness) -> None:
    def fn(tx: Transaction) -> None:
        tx.execute(f"INSERT INTO {q.table('orders')} (id, state) VALUES (1, 'x')")
        try:
            tx.ack("Tasks", (1, "missing"))
        except MessageNotFound:
            pass

    with pytest.raises(MessageNotFound):
        q.backend.transact(fn)
    assert orders(q) == []


@pytest.mark.needs("state", "exact_ack_result")
def test_ack_without_must_exist_tolerates_missing(q: Harness) -> None:
    assert q.backend.transact(lambda tx: tx.ack("Tasks", (9, "none"), must_exist=False)) is False


@pytest.mark.needs("state", "fake_time")
def test_lease_excludes_other_receivers_until_expiry(q: Harness) -> None:
    send(q, (1, "a"))
    other = q.reopen()
    try:
        assert len(receive(q)) == 1
        assert [m for b in other.stream("Tasks", 10, 0) for m in b] == []
        q.clock.advance(LEASE_SECONDS - 0.001)
        assert [m for b in other.stream("Tasks", 10, 0) for m in b] == []
    finally:
        other.close()


@pytest.mark.needs("state")
def test_concurrent_thread_receivers_never_share_a_message(q: Harness) -> None:
    keys = [(i, f"m{i}") for i in range(300)]
    send(q, *keys)
    got: list[tuple[Any, ...]] = []
    lock = threading.Lock()

    def worker() -> None:
        backend = q.reopen()
        try:
            while True:
                batch = [m for b in backend.stream("Tasks", 7, 0) for m in b]
                if not batch:
                    return
                with lock:
                    got.extend(m.key for m in batch)
        finally:
            backend.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        # Generous: the emulator serializes the four readers' transactions, and on
        # a loaded machine 60 s ran out with 15 messages still to read.
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a receiver is still reading"
    assert sorted(got) == sorted(keys)  # every message once, none twice


@pytest.mark.needs("state", "fake_time", "threads")
def test_an_expired_lease_is_redelivered_within_the_first_hour_not_before(q: Harness) -> None:
    """What the documents promise: a lease lasts 10 s; a message whose lease ran
    out is delivered again with back-off within the first hour (no figure)."""
    send(q, (1, "a"))
    [first] = receive(q)
    other = q.reopen()  # another worker: it knows nothing of this one's lease
    try:
        q.clock.advance(LEASE_SECONDS - 1)
        assert [m for b in other.stream("Tasks", 10, 0) for m in b] == []  # still leased
    finally:
        other.close()
    q.clock.advance(1 + 3600)
    [second] = receive(q)
    assert second.key == (1, "a") and second.lease_token != first.lease_token


@pytest.mark.needs("state", "fake_time", "queue_metrics")
def test_lease_expiry_then_redelivery_after_backoff(q: Harness) -> None:
    send(q, (1, "a"))
    first = receive(q)
    assert len(first) == 1
    policy = q.backend.redelivery
    backoff1 = policy.delay(1, LEASE_SECONDS)
    q.clock.advance(LEASE_SECONDS)
    assert receive(q) == []  # lease expired but backoff not over
    assert q.backend.stats("Tasks").backing_off == 1
    q.clock.advance(backoff1 - 0.001)
    assert receive(q) == []
    q.clock.advance(0.001)
    [second] = receive(q)
    assert second.key == (1, "a")
    assert second.lease_token != first[0].lease_token
    # The second expiry backs off exponentially longer.
    q.clock.advance(LEASE_SECONDS + policy.delay(2, 30) - 0.001)
    assert receive(q) == []
    q.clock.advance(0.001)
    assert len(receive(q)) == 1
    assert q.backend.stats("Tasks").lease_expirations == 2


@pytest.mark.needs()
def test_redelivery_schedule_is_exponential_then_hourly(q: Harness) -> None:
    policy = q.backend.redelivery
    delays = [policy.delay(n, 60) for n in range(1, 6)]
    assert delays == [policy.initial * policy.multiplier**i for i in range(5)]
    assert policy.delay(3, 3600 + 1) == 3600


@pytest.mark.needs("state", "fake_time")
def test_renew_extends_the_lease(q: Harness) -> None:
    send(q, (1, "a"))
    [msg] = receive(q)
    q.clock.advance(7.5)
    [row] = q.backend.renew("Tasks", [msg.lease_token])
    assert row.old_token == msg.lease_token
    assert row.new_token is not None and row.new_token != msg.lease_token
    assert row.lease_expiry == q.clock.now() + timedelta(seconds=LEASE_SECONDS)
    q.clock.advance(7.5)  # past the original expiry, within the renewed one
    assert receive(q) == []
    [row2] = q.backend.renew("Tasks", [row.new_token])
    assert row2.new_token is not None


@pytest.mark.needs("state")
def test_renew_unparsable_token_returns_no_row(q: Harness) -> None:
    assert q.backend.renew("Tasks", ["garbage", "", "YWJj"]) == []


@pytest.mark.needs("state", "fake_time")
def test_renew_expired_token_returns_no_row(q: Harness) -> None:
    send(q, (1, "a"))
    [msg] = receive(q)
    q.clock.advance(LEASE_SECONDS)
    assert q.backend.renew("Tasks", [msg.lease_token]) == []


@pytest.mark.needs("state")
def test_renew_acked_unexpired_token_returns_null_new_token(q: Harness) -> None:
    send(q, (1, "a"))
    [msg] = receive(q)
    q.backend.transact(lambda tx: tx.ack("Tasks", msg.key))
    [row] = q.backend.renew("Tasks", [msg.lease_token])
    assert row.new_token is None
    assert row.lease_expiry == msg.lease_expiry


@pytest.mark.needs("state")
def test_renew_mixed_tokens_in_one_call(q: Harness) -> None:
    send(q, (1, "a"), (1, "b"))
    a, b = receive(q)
    q.backend.transact(lambda tx: tx.ack("Tasks", b.key))
    rows = q.backend.renew("Tasks", [a.lease_token, "bad", b.lease_token])
    assert [(r.old_token, r.new_token is None) for r in rows] == [
        (a.lease_token, False),
        (b.lease_token, True),
    ]


@pytest.mark.needs("state")
def test_token_of_a_resent_key_does_not_renew_the_new_message(q: Harness) -> None:
    send(q, (1, "a"))
    [msg] = receive(q)

    def resend(tx: Transaction) -> None:
        tx.ack("Tasks", (1, "a"))
        tx.send("Tasks", (1, "a"), b"new")

    q.backend.transact(resend)
    [row] = q.backend.renew("Tasks", [msg.lease_token])
    assert row.new_token is None
    assert len(receive(q)) == 1  # the new message was not leased by the renew


@pytest.mark.needs("state")
def test_batches_honour_max_batch_size_and_mark_the_last(q: Harness) -> None:
    """What the documents promise of batches: at most max_batch_size messages,
    the last one marked (SpannerLastBatchMessage); a one-shot receive brings every
    ready message once."""
    keys = [(1, f"m{i:02}") for i in range(7)]
    send(q, *keys)
    batches = list(q.backend.stream("Tasks", max_batch_size=3, max_duration=0))
    assert all(1 <= len(b) <= 3 for b in batches), [len(b) for b in batches]
    assert sorted(m.key for b in batches for m in b) == keys
    for batch in batches:
        assert [m.last_in_batch for m in batch] == [False] * (len(batch) - 1) + [True]


@pytest.mark.needs("state", "full_batches")
def test_batches_are_full_while_messages_are_ready(q: Harness) -> None:
    send(q, *[(1, f"m{i:02}") for i in range(7)])
    batches = list(q.backend.stream("Tasks", max_batch_size=3, max_duration=0))
    assert [len(b) for b in batches] == [3, 3, 1]


@pytest.mark.needs("state", "fake_time", "ordered_delivery")
def test_delivery_ordered_by_delivery_time(q: Harness) -> None:
    now = q.clock.now()
    send(q, (1, "c"), deliver_time=now + timedelta(seconds=3))
    send(q, (1, "a"), deliver_time=now + timedelta(seconds=1))
    send(q, (1, "b"), deliver_time=now + timedelta(seconds=2))
    q.clock.advance(5)
    assert [m.key[1] for m in receive(q)] == ["a", "b", "c"]


@pytest.mark.needs("state", "fake_time", "queue_metrics")
def test_ttl_drops_old_messages_and_counts_them(harness: Harness) -> None:
    spec = QueueSpec.simple("Short", ttl=timedelta(hours=1))
    harness.backend.create_queue(spec)
    harness.backend.transact(lambda tx: tx.send("Short", "old", b"x"))
    harness.clock.advance(1800)
    harness.backend.transact(lambda tx: tx.send("Short", "young", b"y"))
    harness.clock.advance(1800 + 1)
    got = [m.key for b in harness.backend.stream("Short", 10, 0) for m in b]
    assert got == [("young",)]
    assert harness.backend.stats("Short").ttl_dropped == 1


@pytest.mark.needs("state")
def test_json_and_bytes_payloads_round_trip(harness: Harness) -> None:
    harness.backend.create_queue(QueueSpec.simple("J", payload=PayloadType.JSON))
    harness.backend.create_queue(QueueSpec.simple("B"))
    doc = {"amount": 12.5, "ids": [1, 2], "note": "ünïcode", "nested": {"ok": True, "x": None}}
    raw = bytes(range(256))
    harness.backend.transact(lambda tx: (tx.send("J", "1", doc), tx.send("B", "1", raw)))
    [j] = [m for b in harness.backend.stream("J", 10, 0) for m in b]
    [bm] = [m for b in harness.backend.stream("B", 10, 0) for m in b]
    assert j.payload == doc
    assert bm.payload == raw


@pytest.mark.needs()
def test_payload_over_the_limit_is_a_clear_error(harness: Harness) -> None:
    harness.backend.create_queue(QueueSpec.simple("Small", max_payload_bytes=1024))
    with pytest.raises(PayloadTooLarge, match=r"2000 bytes .*'Small'.* 1024"):
        harness.backend.transact(lambda tx: tx.send("Small", "1", b"x" * 2000))
    if "state" in harness.capabilities:
        assert harness.backend.stats("Small").depth == 0


@pytest.mark.needs()
def test_wrong_key_or_payload_type_is_a_clear_error(q: Harness) -> None:
    with pytest.raises(InvalidMessage, match="user_id"):
        send(q, ("1", "a"))
    with pytest.raises(InvalidMessage, match="2 part"):
        send(q, (1,))
    with pytest.raises(InvalidMessage, match="bytes payloads"):
        q.backend.transact(lambda tx: tx.send("Tasks", (1, "a"), "text"))


@pytest.mark.needs()
@pytest.mark.parametrize(
    "name",
    ["", "1abc", "drop table", "x;--", 'a"b', "a" * 129, "agentq_internal", None, "ta-sks"],
)
def test_invalid_identifiers_are_rejected(harness: Harness, name: Any) -> None:
    with pytest.raises(InvalidIdentifier):
        harness.backend.create_queue(QueueSpec.simple(name))


def test_invalid_key_column_names_are_rejected() -> None:
    with pytest.raises(InvalidIdentifier, match="key column"):
        QueueSpec("Good", (KeyColumn("bad name", KeyType.INT),))
    with pytest.raises(InvalidIdentifier, match="reserved"):
        QueueSpec("Good", (KeyColumn("payload", KeyType.INT),))


@pytest.mark.needs()
def test_unknown_queue_is_a_clear_error(harness: Harness) -> None:
    with pytest.raises(QueueNotFound, match="Nope"):
        harness.backend.transact(lambda tx: tx.send("Nope", "1", b"x"))
    with pytest.raises(QueueNotFound):
        harness.backend.stream("Nope")


@pytest.mark.needs("state", "app_sql")
def test_interleaved_queue_messages_deleted_with_parent(harness: Harness) -> None:
    b = harness.backend
    harness.create_table(
        sqlite="CREATE TABLE {t} (OrderId INTEGER PRIMARY KEY, s TEXT)",
        googlesql="CREATE TABLE {t} (OrderId INT64 NOT NULL, s STRING(MAX)) PRIMARY KEY (OrderId)",
        postgresql="CREATE TABLE {t} (orderid bigint NOT NULL PRIMARY KEY, s varchar)",
        name="Orders",
    )
    parent = harness.table("Orders")
    b.create_queue(
        QueueSpec(
            "OrderTasks",
            (KeyColumn("OrderId", KeyType.INT), KeyColumn("TaskId", KeyType.STR)),
            parent=parent,
        )
    )
    b.transact(
        lambda tx: (
            tx.execute(f"INSERT INTO {parent} (OrderId, s) VALUES (1, 'new')"),
            tx.send("OrderTasks", (1, "ship"), b"x"),
        )
    )
    with pytest.raises(Exception, match="parent"):
        b.transact(lambda tx: tx.send("OrderTasks", (2, "ship"), b"x"))
    b.transact(lambda tx: tx.execute(f"DELETE FROM {parent} WHERE OrderId = 1"))
    assert b.stats("OrderTasks").depth == 0


@pytest.mark.needs("state")
def test_stream_wakes_promptly_on_send_from_another_thread(q: Harness) -> None:
    got: list[Message] = []
    started = threading.Event()

    def receiver() -> None:
        started.set()
        for batch in q.backend.stream("Tasks", 10, max_duration=60):
            got.extend(batch)
            return

    t = threading.Thread(target=receiver)
    t.start()
    started.wait()
    send(q, (1, "wake"))
    # No fake time passes: only the commit notification can wake the receiver.
    t.join(10)
    assert not t.is_alive()
    assert [m.key for m in got] == [(1, "wake")]


@pytest.mark.needs("state", "fake_time", "client_wait")
def test_stream_wakes_when_a_scheduled_message_becomes_due(q: Harness) -> None:
    send(q, (1, "soon"), deliver_time=q.clock.now() + timedelta(seconds=5))
    got: list[Message] = []

    def receiver() -> None:
        for batch in q.backend.stream("Tasks", 10, max_duration=60):
            got.extend(batch)
            return

    t = threading.Thread(target=receiver)
    t.start()
    while q.clock.sleepers == 0 and t.is_alive():
        t.join(0.001)
    q.clock.advance(5)
    t.join(10)
    assert [m.key for m in got] == [(1, "soon")]


@pytest.mark.needs("state", "fake_time", "client_wait")
def test_stream_ends_after_max_duration(q: Harness) -> None:
    result: list[list[Message]] = []

    def receiver() -> None:
        result.extend(q.backend.stream("Tasks", 10, max_duration=30))

    t = threading.Thread(target=receiver)
    t.start()
    while q.clock.sleepers == 0 and t.is_alive():
        t.join(0.001)
    q.clock.advance(31)
    t.join(10)
    assert not t.is_alive() and result == []


@pytest.mark.needs("state")
def test_records_list_by_prefix_in_key_order_with_limit(harness: Harness) -> None:
    keys = ["a:1", "a:2", "a:3", "a;", "ab", "b:1"]

    def fn(tx: Transaction) -> None:
        for k in reversed(keys):
            tx.put_record("things", k, {"k": k})
        tx.put_record("other", "a:9", {"k": "other"})

    harness.backend.transact(fn)
    assert [k for k, _ in harness.backend.list_records("things", "a:")] == ["a:1", "a:2", "a:3"]
    assert [k for k, _ in harness.backend.list_records("things", "a:", limit=2)] == ["a:1", "a:2"]
    assert [k for k, _ in harness.backend.list_records("things")] == sorted(keys)
    assert harness.backend.list_records("things", "zz") == []


@pytest.mark.needs("state")
def test_read_records_returns_values_with_versions_and_skips_missing(harness: Harness) -> None:
    harness.backend.transact(
        lambda tx: [tx.put_record("things", k, {"k": k, "n": 1}) for k in ("a", "b")]
    )
    read = harness.backend.read_records("things", ["b", "missing", "a", "b"])
    assert sorted(read) == ["a", "b"]
    assert read["a"].value == {"k": "a", "n": 1}
    assert harness.backend.read_records("things", []) == {}
    many = [f"k{i:04d}" for i in range(1200)]  # more than one IN (...) list
    harness.backend.transact(lambda tx: [tx.put_record("bulk", k, {"i": k}) for k in many])
    assert sorted(harness.backend.read_records("bulk", many)) == many


@pytest.mark.needs("state")
def test_replace_records_writes_only_what_is_unchanged_since_the_read(
    harness: Harness,
) -> None:
    b = harness.backend
    b.transact(lambda tx: [tx.put_record("things", k, {"k": k, "n": 1}) for k in "abcd"])
    read = b.read_records("things", ["a", "b", "c", "d"])
    # Meanwhile another writer changes b and deletes c.
    b.transact(lambda tx: (tx.put_record("things", "b", {"k": "b", "n": 99}),
                           tx.delete_record("things", "c")))  # fmt: skip

    def swap(tx: Transaction) -> list[str]:
        changed = tx.replace_records(
            "things", [(k, read[k].version, {"k": k, "n": 2}) for k in "abcd"]
        )
        tx.put_record("things", "e", {"k": "e"})  # the transaction goes on
        return changed

    assert sorted(b.transact(swap)) == ["b", "c"]
    assert b.get_record("things", "a") == {"k": "a", "n": 2}
    assert b.get_record("things", "b") == {"k": "b", "n": 99}  # the newer write stands
    assert b.get_record("things", "c") is None  # not resurrected
    assert b.get_record("things", "d") == {"k": "d", "n": 2}
    assert b.get_record("things", "e") == {"k": "e"}
    # A version is single-use: the swapped records are at a new version now.
    assert b.transact(
        lambda tx: tx.replace_records("things", [("a", read["a"].version, {"n": 3})])
    ) == ["a"]


@pytest.mark.needs("state")
def test_a_record_encoded_beforehand_is_stored_as_the_same_record(harness: Harness) -> None:
    value = {"k": "a", "nested": {"n": [1, 2]}, "text": "naïve ✓"}
    encoded = encode_record(value)

    def fn(tx: Transaction) -> dict[str, Any] | None:
        tx.put_record("things", "a", encoded)
        return tx.get_record("things", "a")  # read-your-writes sees the record

    assert harness.backend.transact(fn) == value
    assert harness.backend.get_record("things", "a") == value
    version = harness.backend.read_records("things", ["a"])["a"].version
    changed = harness.backend.transact(
        lambda tx: tx.replace_records("things", [("a", version, encode_record({"k": "b"}))])
    )
    assert changed == [] and harness.backend.get_record("things", "a") == {"k": "b"}
