"""Keys that no backend can store (an int beyond INT64, text that is not valid
Unicode) are refused on every backend as InvalidMessage naming the column and
the value, before anything reaches the driver."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.errors import InvalidMessage
from agentq.spec import KeyColumn, KeyType, QueueSpec

from .conftest import Harness

SPEC = QueueSpec("Numbered", (KeyColumn("seq", KeyType.INT), KeyColumn("name", KeyType.STR)))
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


@pytest.fixture
def numbered(harness: Harness) -> Harness:
    harness.backend.create_queue(SPEC)
    return harness


@pytest.mark.needs()
@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 10**30])
def test_an_int_key_beyond_int64_is_invalid_message_naming_column_and_value(
    numbered: Harness, value: int
) -> None:
    b = numbered.backend
    for op in ("send", "ack"):

        def fn(tx: Any, op: str = op) -> None:
            if op == "send":
                tx.send("Numbered", (value, "a"), b"x")
            else:
                tx.ack("Numbered", (value, "a"))

        with pytest.raises(InvalidMessage, match=rf"'seq'.*{value}.*64-bit") as info:
            b.transact(fn)
        assert not isinstance(info.value, OverflowError)


@pytest.mark.needs()
def test_a_text_key_that_is_not_valid_unicode_is_invalid_message(numbered: Harness) -> None:
    with pytest.raises(InvalidMessage, match=r"'name'.*UTF-8"):
        numbered.backend.transact(lambda tx: tx.send("Numbered", (1, "a\udcff"), b"x"))


@pytest.mark.needs("state")
def test_the_int64_bounds_themselves_are_keys(numbered: Harness) -> None:
    b = numbered.backend
    b.transact(lambda tx: [tx.send("Numbered", (v, "a"), b"x") for v in (INT64_MAX, INT64_MIN)])
    keys = {m.key for batch in b.stream("Numbered", 10) for m in batch}
    assert keys == {(INT64_MAX, "a"), (INT64_MIN, "a")}
