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
