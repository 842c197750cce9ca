"""Tasks listed by rare status (issue 38 item 1): SQLite and PostgreSQL read them
through an index of the rare statuses that every record write keeps (a column
the writer sets, not a trigger), Spanner by filtering. Whatever the path, a
listing must say what the records say after every kind of write: a whole
record put, inserted or swapped, fields set or swapped, a record deleted, a
task moving into a rare status and out of it again."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.backends import encode_fields, encode_record

from .conftest import Harness

RARE = ["awaiting_approval", "cancelled", "dead", "failed", "outcome_unknown",
        "retry_scheduled", "waiting"]  # fmt: skip


def _listed(b: Any, statuses: list[str], **kw: Any) -> list[tuple[str, str]]:
    rows = b.list_records("tasks", where={"status": statuses}, **kw)
    return [(k, v["status"]) for k, v in rows]


@pytest.mark.needs("state")
def test_a_listing_by_rare_status_follows_every_kind_of_write(harness: Harness) -> None:
    b = harness.backend

    def fill(tx: Any) -> None:
        tx.put_record("tasks", "t1", {"status": "queued", "tool": "a"})
        tx.put_record("tasks", "t2", encode_record({"status": "dead", "tool": "a"}))
        tx.insert_record("tasks", "t3", {"status": "waiting", "tool": "b"})
        tx.put_record("tasks", "t4", {"status": "succeeded", "tool": "b"})
        tx.put_record("tasks", "t5", {"status": 7, "tool": "b"})  # not a string: not rare
        tx.put_record("other", "o1", {"status": "dead"})  # not a task

    b.transact(fill)
    assert _listed(b, RARE) == [("t2", "dead"), ("t3", "waiting")]
    assert b.list_records("other", where={"status": ["dead"]})[0][0] == "o1"

    def move(tx: Any) -> None:
        tx.update_records("tasks", [("t1", encode_fields({"status": "retry_scheduled"})),
                                    ("t2", encode_fields({"status": "queued"})),
                                    ("t3", encode_fields({"note": "x"}))])  # fmt: skip

    b.transact(move)
    assert _listed(b, RARE) == [("t1", "retry_scheduled"), ("t3", "waiting")]

    versions = b.read_records("tasks", ["t1", "t3", "t4"])
    b.transact(lambda tx: tx.replace_records("tasks", [
        ("t1", versions["t1"].version, encode_fields({"status": "running"})),
        ("t3", versions["t3"].version, {"status": "cancelled", "tool": "b"}),
        ("t4", versions["t4"].version, encode_record({"status": "outcome_unknown", "tool": "b"})),
    ]))  # fmt: skip
    assert _listed(b, RARE) == [("t3", "cancelled"), ("t4", "outcome_unknown")]
    assert _listed(b, ["cancelled"], descending=True, limit=1) == [("t3", "cancelled")]
    assert _listed(b, RARE, descending=True, limit=1) == [("t4", "outcome_unknown")]
    assert _listed(b, RARE, after="t3") == [("t4", "outcome_unknown")]

    b.transact(lambda tx: tx.delete_record("tasks", "t3"))
    b.transact(lambda tx: tx.put_record("tasks", "t4", {"status": "succeeded", "tool": "b"}))
    assert _listed(b, RARE) == []
    assert _listed(b, ["queued", "dead"]) == [("t2", "queued")]
    assert [k for k, _ in b.list_records("tasks", where={"status": ["queued", None]})] == ["t2"]


@pytest.mark.needs("state")
def test_a_listing_of_open_approvals_follows_their_decisions(harness: Harness) -> None:
    b = harness.backend
    b.transact(lambda tx: [tx.put_record("approvals", f"a{i}", {"status": s}) for i, s in
                           enumerate(["pending", "approved", "escalated", "pending"])])  # fmt: skip
    open_ = {"status": ["pending", "escalated"]}
    assert [k for k, _ in b.list_records("approvals", where=open_)] == ["a0", "a2", "a3"]
    b.transact(lambda tx: tx.update_records("approvals", [
        ("a0", encode_fields({"status": "approved"})),
        ("a1", encode_fields({"status": "escalated"}))]))  # fmt: skip
    assert [k for k, _ in b.list_records("approvals", where=open_)] == ["a1", "a2", "a3"]
    assert [k for k, _ in b.list_records("approvals", where=open_, descending=True,
                                         limit=2)] == ["a3", "a2"]  # fmt: skip


@pytest.mark.needs("state")
def test_a_listing_of_parked_or_unsuccessful_runs_follows_every_kind_of_write(
    harness: Harness,
) -> None:
    """Durable runs are in the index unless they succeeded: queued (or
    running), parked (awaiting their tool calls or an approval), or ended
    other than by succeeding."""
    b = harness.backend
    rare = {"status": ["awaiting_approval", "awaiting_tools", "cancelled", "failed"]}

    def listed(**kw: Any) -> list[tuple[str, str]]:
        return [(k, v["status"]) for k, v in b.list_records("runs", where=rare, **kw)]

    b.transact(lambda tx: [tx.put_record("runs", f"run{i}", {"status": s}) for i, s in
                           enumerate(["queued", "awaiting_tools", "succeeded",
                                      "awaiting_approval", "failed"])])  # fmt: skip
    assert listed() == [("run1", "awaiting_tools"), ("run3", "awaiting_approval"),
                        ("run4", "failed")]  # fmt: skip
    b.transact(lambda tx: tx.update_records("runs", [
        ("run0", encode_fields({"status": "awaiting_tools"})),
        ("run1", encode_fields({"status": "queued"}))]))  # fmt: skip
    versions = b.read_records("runs", ["run3"])
    b.transact(lambda tx: tx.replace_records("runs", [
        ("run3", versions["run3"].version, encode_record({"status": "cancelled"}))]))  # fmt: skip
    assert listed() == [("run0", "awaiting_tools"), ("run3", "cancelled"), ("run4", "failed")]
    assert listed(descending=True, limit=1) == [("run4", "failed")]
    only = b.list_records("runs", where={"status": ["awaiting_tools"]})
    assert [k for k, _ in only] == ["run0"]
    both = b.list_records("runs", where={"status": ["queued", "failed"]})
    assert [k for k, _ in both] == ["run1", "run4"]
    # A run that succeeded leaves the index; a new message queues it again.
    b.transact(lambda tx: tx.update_records("runs", [("run1", encode_fields({
        "status": "succeeded"}))]))  # fmt: skip
    in_progress = {"status": ["queued"]}
    assert [k for k, _ in b.list_records("runs", where=in_progress)] == []
    b.transact(lambda tx: tx.put_record("runs", "run2", {"status": "queued"}))
    assert [k for k, _ in b.list_records("runs", where=in_progress)] == ["run2"]
    # Any status with a common one: the key order's walk, same answer.
    mixed = b.list_records("runs", where={"status": ["succeeded", "failed"]})
    assert [k for k, _ in mixed] == ["run1", "run4"]
