"""Record keys come from users (task ids, approval ids, idempotency and ordering
keys typed on a command line): one that is not valid Unicode text, such as the
surrogate-escaped bytes of a mistyped argument, can name no stored record, so a
read finds nothing and a write is refused as InvalidMessage. No raw driver or
codec error reaches the caller."""

from __future__ import annotations

import pytest

from agentq.backends import Transaction
from agentq.errors import InvalidMessage

from .conftest import Harness

BAD = "task-\udcff"  # what Python makes of the byte 0xff in a command-line argument


@pytest.mark.needs("state")
def test_reading_a_record_under_an_invalid_key_finds_nothing(harness: Harness) -> None:
    b = harness.backend
    b.transact(lambda tx: tx.put_record("ledger", "good", {"n": 1}))
    assert b.get_record("ledger", BAD) is None
    assert set(b.read_records("ledger", ["good", BAD])) == {"good"}
    assert b.list_records("ledger", prefix=BAD) == []
    assert b.transact(lambda tx: tx.get_record("ledger", BAD)) is None
    assert b.transact(lambda tx: tx.delete_record("ledger", BAD)) is False
    [(_, version)] = [(k, r.version) for k, r in b.read_records("ledger", ["good"]).items()]
    stale = b.transact(
        lambda tx: tx.replace_records("ledger", [(BAD, version, {}), ("good", version, {"n": 2})])
    )
    assert stale == [BAD]
    assert b.get_record("ledger", "good") == {"n": 2}


@pytest.mark.needs("state")
@pytest.mark.parametrize("op", ["put", "insert"])
def test_writing_a_record_under_an_invalid_key_is_invalid_message(
    harness: Harness, op: str
) -> None:
    def fn(tx: Transaction) -> None:
        tx.put_record("ledger", "good", {"n": 1})
        if op == "put":
            tx.put_record("ledger", BAD, {"n": 2})
        else:
            tx.insert_record("ledger", BAD, {"n": 2})

    with pytest.raises(InvalidMessage, match=r"'ledger'.*UTF-8"):
        harness.backend.transact(fn)
    assert harness.backend.get_record("ledger", "good") is None  # nothing committed
