"""``tx.ack_all`` and ``tx.get_records``: a committer's group of completions acks
its messages and asks for the tasks waiting on them as sets, and each backend
must mean by them exactly what one ``ack`` / ``get_record`` per key means."""

from __future__ import annotations

import pytest

from agentq.backends import Transaction
from agentq.errors import InvalidMessage, MessageNotFound

from .conftest import Harness
from .test_queue_contract import orders, receive, send, with_tasks_queue


@pytest.fixture
def q(harness: Harness) -> Harness:
    return with_tasks_queue(harness)


@pytest.mark.needs("state", "fake_time")
def test_ack_all_deletes_every_message_named_and_only_those(q: Harness) -> None:
    send(q, (1, "a"), (1, "b"), (2, "a"), (3, "c"))
    q.backend.transact(lambda tx: tx.ack_all("Tasks", [(1, "a"), (2, "a"), (3, "c")]))
    assert [m.key for m in receive(q)] == [(1, "b")]
    q.backend.transact(lambda tx: tx.ack_all("Tasks", []))  # nothing to ack: nothing happens
    assert q.backend.stats("Tasks").depth == 1


@pytest.mark.needs("state", "app_sql")
def test_ack_all_with_one_message_gone_rolls_back_everything_even_if_caught(q: Harness) -> None:
    send(q, (1, "a"), (1, "b"))
    q.backend.transact(lambda tx: tx.ack("Tasks", (1, "b")))  # another delivery won this one

    def group(tx: Transaction) -> None:
        tx.execute(f"INSERT INTO {q.table('orders')} (id, state) VALUES (1, 'refunded')")
        try:
            tx.ack_all("Tasks", [(1, "a"), (1, "b")])
        except MessageNotFound:
            pass  # swallowing it must not let the transaction commit

    with pytest.raises(MessageNotFound, match="already acknowledged"):
        q.backend.transact(group)
    assert orders(q) == []
    assert [m.key for m in receive(q)] == [(1, "a")]  # its ack was rolled back too


@pytest.mark.needs()
def test_ack_all_checks_every_key(q: Harness) -> None:
    with pytest.raises(InvalidMessage):
        q.backend.transact(lambda tx: tx.ack_all("Tasks", [(1, "a"), ("not an int", "b")]))


@pytest.mark.needs("state")
def test_get_records_reads_the_transactions_own_writes_and_leaves_out_missing_keys(
    harness: Harness,
) -> None:
    b = harness.backend
    b.transact(lambda tx: [tx.put_record("things", k, {"k": k, "n": 1}) for k in "abc"])

    def read(tx: Transaction) -> dict[str, dict[str, object]]:
        tx.put_record("things", "d", {"k": "d", "n": 2})
        tx.put_record("things", "a", {"k": "a", "n": 3})
        tx.delete_record("things", "b")
        return tx.get_records("things", ["a", "b", "d", "missing", "a", "c"])

    assert b.transact(read) == {
        "a": {"k": "a", "n": 3},
        "c": {"k": "c", "n": 1},
        "d": {"k": "d", "n": 2},
    }
    assert b.transact(lambda tx: tx.get_records("things", [])) == {}
    assert b.transact(lambda tx: tx.get_records("other", ["a"])) == {}


@pytest.mark.needs("state")
def test_get_records_of_more_keys_than_one_read_takes(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite and Spanner read 500 keys per IN (...) list / query; 2.4 reads' worth
    # of keys (every seventh missing, three repeated) cross two chunk boundaries
    # and end mid-chunk, and the keys on either side of each boundary exist. On
    # Spanner a read takes 50 here: 1,200 writes took the emulator 20-30 s.
    chunk = 500
    if harness.kind.startswith("spanner"):
        from agentq.backends.spanner import records

        chunk = 50
        monkeypatch.setattr(records, "READ_CHUNK", chunk)
    count = chunk * 12 // 5
    edges = {chunk - 1, chunk, 2 * chunk - 1, 2 * chunk, count - 1}
    b = harness.backend
    present = [f"k{i:04d}" for i in range(count) if i % 7 or i in edges]
    b.transact(lambda tx: [tx.put_record("things", k, {"k": k}) for k in present])
    wanted = [f"k{i:04d}" for i in range(count)] + ["k0000", "k0001", f"k{count - 1:04d}"]
    found = b.transact(lambda tx: tx.get_records("things", wanted))
    assert sorted(found) == present
    assert all(found[k] == {"k": k} for k in present)


@pytest.mark.needs("state")
def test_delete_records_deletes_those_there_and_says_which(harness: Harness) -> None:
    # A pruner's batch: what one delete_record per key would do and return.
    b = harness.backend
    b.transact(lambda tx: [tx.put_record("things", k, {"k": k}) for k in "abcd"])
    b.transact(lambda tx: tx.put_record("other", "a", {"k": "a"}))

    def delete(tx: Transaction) -> list[str]:
        tx.put_record("things", "new", {"k": "new"})  # this transaction's own write
        tx.delete_record("things", "d")
        return tx.delete_records("things", ["c", "missing", "a", "d", "a", "new", "x\x00y"])

    assert b.transact(delete) == ["c", "a", "new"]
    assert b.list_records("things") == [("b", {"k": "b"})]
    assert b.get_record("other", "a") == {"k": "a"}
    assert b.transact(lambda tx: tx.delete_records("things", [])) == []
