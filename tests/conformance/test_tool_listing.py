"""Tasks listed by tool (issue 38 item 1): ``GET /v1/tasks?tool=...``, the
console's tool filter and ``agentq tasks --tool`` filter on the record's
``tool``. Every backend reads them through the tool column its insert writes
(``agentq.backends.tool_column``) unless an owner's or a rare status's index
serves the listing better; whatever the path, a listing must say what the
records say after every kind of write."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.backends import encode_fields, encode_record

from .conftest import Harness


def _listed(b: Any, tools: list[Any], **kw: Any) -> list[str]:
    where = {"tool": tools, **kw.pop("where", {})}
    return [k for k, _ in b.list_records("tasks", where=where, **kw)]


def _fill(tx: Any) -> None:
    tx.put_record("tasks", "t1", {"status": "queued", "tool": "refund", "created_by": "ann"})
    tx.put_record("tasks", "t2", encode_record({"status": "dead", "tool": "ship",
                                                "created_by": "bob"}))  # fmt: skip
    tx.insert_record("tasks", "t3", {"status": "waiting", "tool": "refund", "created_by": "bob"})
    tx.put_record("tasks", "t4", encode_record({"status": "succeeded", "tool": "refund"})
                  .extended(',"args":{"n":1}'))  # fmt: skip
    tx.put_record("tasks", "t5", {"status": "succeeded", "tool": 7})  # not a string
    tx.put_record("tasks", "t6", {"status": "succeeded"})  # no tool
    tx.put_record("other", "o1", {"tool": "refund"})  # not a task


@pytest.mark.needs("state")
def test_a_listing_by_tool_follows_every_kind_of_write(harness: Harness) -> None:
    b = harness.backend
    b.transact(_fill)
    assert _listed(b, ["refund"]) == ["t1", "t3", "t4"]
    assert _listed(b, ["refund", "ship"], descending=True, limit=2) == ["t4", "t3"]
    assert _listed(b, ["refund"], after="t1", limit=1) == ["t3"]
    assert _listed(b, ["refund"], after="t3", descending=True) == ["t1"]
    assert _listed(b, ["refund", None]) == ["t1", "t3", "t4", "t6"]
    assert _listed(b, ["nothing"]) == [] and _listed(b, []) == []
    assert _listed(b, ["refund"], where={"status": ["succeeded"]}) == ["t4"]
    assert _listed(b, ["refund", "ship"], where={"status": ["dead", "waiting"]}) == ["t2", "t3"]
    assert _listed(b, ["refund"], where={"created_by": ["bob"]}) == ["t3"]
    assert [k for k, _ in b.list_records("other", where={"tool": ["refund"]})] == ["o1"]

    # Later writes keep the tool the insert wrote.
    versions = b.read_records("tasks", ["t1", "t3"])
    b.transact(lambda tx: tx.replace_records("tasks", [
        ("t1", versions["t1"].version, encode_fields({"status": "running"})),
        ("t3", versions["t3"].version, {"status": "dead", "tool": "refund", "created_by": "bob"}),
    ]))  # fmt: skip
    b.transact(lambda tx: tx.update_records("tasks", [("t4", encode_fields({"note": "x"}))]))
    b.transact(lambda tx: tx.put_record("tasks", "t2", {"status": "cancelled", "tool": "ship"}))
    assert _listed(b, ["refund"]) == ["t1", "t3", "t4"]
    assert _listed(b, ["refund"], where={"status": ["running"]}) == ["t1"]
    assert _listed(b, ["ship"]) == ["t2"]

    b.transact(lambda tx: tx.delete_records("tasks", ["t1", "t3"]))
    assert _listed(b, ["refund"]) == ["t4"]
    b.transact(lambda tx: tx.put_record("tasks", "t1", {"status": "queued", "tool": "ship"}))
    assert _listed(b, ["ship"]) == ["t1", "t2"]  # a new record of the key: its own tool
