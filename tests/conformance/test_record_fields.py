"""``tx.update_records``: set some top-level fields of records, leave the rest.

A task's completion writes only what it changes (status, result, times) and not
its arguments again; these tests pin what that must mean on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.backends import Transaction, encode_fields

from .conftest import Harness


@pytest.mark.needs("state")
def test_update_records_sets_the_named_fields_and_keeps_the_others(harness: Harness) -> None:
    b = harness.backend
    args = {"text": 'naïve ✓ "quoted" \\ \n', "n": 2**70, "x": 0.1, "flag": True, "none": None}
    b.transact(
        lambda tx: [tx.put_record("things", k, {"k": k, "args": args, "s": "old"}) for k in "ab"]
    )
    result = {"nested": [1, {"deep": None}], "ratio": 0.30000000000000004, "ok": False}

    def update(tx: Transaction) -> tuple[list[str], dict[str, Any] | None]:
        missing = tx.update_records(
            "things",
            [
                ("a", encode_fields({"s": "new", "result": result, "error": None})),
                ("missing", encode_fields({"s": "new"})),
                ("b", encode_fields({"s": "other"})),
            ],
        )
        return missing, tx.get_record("things", "a")  # read-your-writes

    missing, seen = b.transact(update)
    assert missing == ["missing"]
    expected = {"k": "a", "args": args, "s": "new", "result": result, "error": None}
    assert seen == expected
    assert b.get_record("things", "a") == expected
    assert b.get_record("things", "b") == {"k": "b", "args": args, "s": "other"}
    assert b.get_record("things", "missing") is None  # not created


def test_encode_fields_refuses_what_no_json_holds() -> None:
    with pytest.raises(ValueError):
        encode_fields({"result": float("nan")})


@pytest.mark.needs("state")
def test_replace_records_with_fields_swaps_them_in_only_at_the_version_read(
    harness: Harness,
) -> None:
    b = harness.backend
    args = {"text": "naïve ✓", "n": [1, 2]}
    b.transact(
        lambda tx: [tx.put_record("things", k, {"k": k, "args": args, "n": 1}) for k in "ab"]
    )
    read = b.read_records("things", ["a", "b"])
    b.transact(lambda tx: tx.put_record("things", "b", {"k": "b", "n": 99}))  # b changes meanwhile
    fields = encode_fields({"n": 2, "status": "running"})
    changed = b.transact(
        lambda tx: tx.replace_records("things", [(k, read[k].version, fields) for k in "ab"])
    )
    assert changed == ["b"]
    assert b.get_record("things", "a") == {"k": "a", "args": args, "n": 2, "status": "running"}
    assert b.get_record("things", "b") == {"k": "b", "n": 99}  # the newer write stands
    # The swapped record is at a new version: the old one no longer matches.
    assert b.transact(
        lambda tx: tx.replace_records("things", [("a", read["a"].version, fields)])
    ) == ["a"]


#: Values a fast JSON decoder could read differently from ``json.loads``: an
#: integer beyond 64 bits (orjson: a float), the extremes of floats, a negative
#: zero, escapes, text beyond the BMP. ``repr`` tells an int from a float and
#: -0.0 from 0.0, which ``==`` does not.
EXACT = {"big": 2**70 + 1, "neg": -(2**64) - 3, "i64": 2**63 - 1, "max": 1.7976931348623157e308,
         "tiny": 5e-324, "point": 0.1, "zero": -0.0, "e": 1e16, "nul": "a\x00b",
         "text": 'naïve ✓ 😀 "q" \\', "nested": [[2**66], {"k": [None, True, 1.5]}]}  # fmt: skip


@pytest.mark.needs("state")
def test_every_read_of_a_record_gives_what_json_loads_gives(harness: Harness) -> None:
    # Each backend decodes stored records with agentq.jsontext.decode (orjson
    # where it agrees with json.loads): every way of reading must still give
    # the standard library's values, merged field updates included.
    b = harness.backend
    want = repr({"k": "a", "args": EXACT, "result": EXACT["nested"], "more": EXACT["big"]})
    b.transact(lambda tx: tx.put_record("things", "a", {"k": "a", "args": EXACT}))
    result = encode_fields({"result": EXACT["nested"]})
    b.transact(lambda tx: tx.update_records("things", [("a", result)]))
    version = b.read_records("things", ["a"])["a"].version
    more = encode_fields({"more": EXACT["big"]})
    assert b.transact(lambda tx: tx.replace_records("things", [("a", version, more)])) == []
    seen = [
        b.get_record("things", "a"),
        b.read_records("things", ["a"])["a"].value,
        dict(b.list_records("things"))["a"],
        b.transact(lambda tx: tx.get_record("things", "a")),
        b.transact(lambda tx: tx.get_records("things", ["a"])["a"]),
    ]
    assert [repr(s) for s in seen] == [want] * len(seen)
