"""Tasks listed and counted by owner (issue 38 item 1): an agent's own task
listing filters on ``created_by``, and its overview counts its own tasks.
SQLite and PostgreSQL read them through the owner column its insert writes
(``agentq.backends.owners``), Spanner by filtering; whatever the path, a
listing must say what the records say after every kind of write, and the
owner's count (``record_count(..., owner=...)``, new here: every backend
failed these tests before it) must follow inserts and deletes only."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.backends import encode_fields, encode_record

from .conftest import Harness


def _listed(b: Any, owners: list[Any], **kw: Any) -> list[str]:
    return [k for k, _ in b.list_records("tasks", where={"created_by": owners, **kw.pop("where",
                                         {})}, **kw)]  # fmt: skip


def _fill(tx: Any) -> None:
    tx.put_record("tasks", "t1", {"status": "queued", "created_by": "ann"})
    tx.put_record("tasks", "t2", encode_record({"status": "dead", "created_by": "bob"}))
    tx.insert_record("tasks", "t3", {"status": "waiting", "created_by": "ann"})
    tx.put_record("tasks", "t4", encode_record({"status": "succeeded", "created_by": "ann"})
                  .extended(',"args":{"n":1}'))  # fmt: skip
    tx.put_record("tasks", "t5", {"status": "succeeded", "created_by": 7})  # not a string
    tx.put_record("tasks", "t6", {"status": "succeeded"})  # no owner (an early release's)
    tx.put_record("other", "o1", {"created_by": "ann"})  # not a task


@pytest.mark.needs("state")
def test_a_listing_by_owner_follows_every_kind_of_write(harness: Harness) -> None:
    b = harness.backend
    b.transact(_fill)
    assert _listed(b, ["ann"]) == ["t1", "t3", "t4"]
    assert _listed(b, ["ann", "bob"], descending=True, limit=2) == ["t4", "t3"]
    assert _listed(b, ["ann"], after="t1", limit=1) == ["t3"]
    assert _listed(b, ["ann"], after="t3", descending=True) == ["t1"]
    assert _listed(b, ["ann", None]) == ["t1", "t3", "t4", "t6"]
    assert _listed(b, ["nobody"]) == [] and _listed(b, []) == []
    assert _listed(b, ["ann"], where={"status": ["waiting", "dead"]}) == ["t3"]
    assert _listed(b, ["ann", "bob"], where={"status": ["dead", "waiting"]}) == ["t2", "t3"]
    assert _listed(b, ["ann"], where={"status": ["succeeded"]}, descending=True) == ["t4"]
    assert _listed(b, ["ann"], where={"status": ["queued", "waiting"]}, limit=1) == ["t1"]
    assert [k for k, _ in b.list_records("other", where={"created_by": ["ann"]})] == ["o1"]

    # Later writes keep the owner the insert wrote, whatever they carry.
    versions = b.read_records("tasks", ["t1", "t3"])
    b.transact(lambda tx: tx.replace_records("tasks", [
        ("t1", versions["t1"].version, encode_fields({"status": "running"})),
        ("t3", versions["t3"].version, {"status": "dead", "created_by": "ann"}),
    ]))  # fmt: skip
    b.transact(lambda tx: tx.update_records("tasks", [("t4", encode_fields({"note": "x"}))]))
    b.transact(lambda tx: tx.put_record("tasks", "t2", {"status": "cancelled",
                                                        "created_by": "bob"}))  # fmt: skip
    assert _listed(b, ["ann"]) == ["t1", "t3", "t4"]
    assert _listed(b, ["ann"], where={"status": ["dead"]}) == ["t3"]
    assert _listed(b, ["ann", "bob"], where={"status": ["cancelled", "dead"]}) == ["t2", "t3"]
    assert _listed(b, ["ann"], where={"status": ["running"]}) == ["t1"]

    b.transact(lambda tx: tx.delete_records("tasks", ["t1", "t3"]))
    assert _listed(b, ["ann"]) == ["t4"]
    b.transact(lambda tx: tx.put_record("tasks", "t1", {"status": "queued", "created_by": "bob"}))
    assert _listed(b, ["bob"]) == ["t1", "t2"]  # a new record of the key: its own owner


@pytest.mark.needs("state")
def test_an_owners_count_follows_inserts_and_deletes(harness: Harness) -> None:
    b = harness.backend
    b.transact(_fill)
    assert [b.record_count("tasks", owner=o) for o in ("ann", "bob", "7", "nobody")] == [3, 1, 0, 0]
    assert b.record_count("dead_letters", owner="ann") == 0
    # Puts over a record and refused inserts count nothing; a rollback neither.
    b.transact(lambda tx: tx.put_record("tasks", "t1", {"status": "dead", "created_by": "ann"}))
    b.transact(lambda tx: tx.insert_record("tasks", "t3", {"created_by": "ann"}))

    def undone(tx: Any) -> None:
        tx.put_record("tasks", "t9", {"created_by": "ann"})
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        b.transact(undone)
    assert b.record_count("tasks", owner="ann") == 3
    b.transact(lambda tx: tx.delete_record("tasks", "t1"))
    b.transact(lambda tx: tx.delete_records("tasks", ["t2", "t4", "missing"]))
    assert (b.record_count("tasks", owner="ann"), b.record_count("tasks", owner="bob")) == (1, 0)
    assert b.record_count("tasks") == 3
    with pytest.raises(ValueError, match="not counted"):
        b.record_count("other", owner="ann")


def _runs(b: Any, owners: list[Any], **kw: Any) -> list[str]:
    where = {"owner": owners, **kw.pop("where", {})}
    return [k for k, _ in b.list_records("runs", where=where, **kw)]


@pytest.mark.needs("state")
def test_a_listing_of_an_owners_runs_follows_every_kind_of_write(harness: Harness) -> None:
    """A durable run's owner is its ``owner`` (the principal that started it):
    a principal that does not see everyone's runs lists its own (``GET
    /v1/runs``, the console's runs page), through the owner column too."""
    b = harness.backend

    def fill(tx: Any) -> None:
        tx.put_record("runs", "r1", {"status": "queued", "owner": "ann", "agent": "a"})
        tx.put_record("runs", "r2", encode_record({"status": "awaiting_approval", "owner": "bob"}))
        tx.insert_record("runs", "r3", {"status": "awaiting_tools", "owner": "ann"})
        tx.put_record("runs", "r4", {"status": "succeeded", "owner": "ann", "created_by": "bob"})
        tx.put_record("runs", "r5", {"status": "failed"})  # no owner

    b.transact(fill)
    assert _runs(b, ["ann"]) == ["r1", "r3", "r4"]
    assert _runs(b, ["ann", "bob"], descending=True, limit=2) == ["r4", "r3"]
    assert _runs(b, ["ann"], after="r3", descending=True) == ["r1"]
    assert _runs(b, ["ann", None]) == ["r1", "r3", "r4", "r5"]
    assert _runs(b, ["ann"], where={"status": ["awaiting_tools", "awaiting_approval"]}) == ["r3"]
    assert _runs(b, ["ann", "bob"], where={"status": ["awaiting_approval"]}) == ["r2"]
    assert _runs(b, ["ann"], where={"agent": ["a"]}) == ["r1"]
    # A run's created_by is not its owner.
    assert [k for k, _ in b.list_records("runs", where={"created_by": ["bob"]})] == ["r4"]

    # Each turn writes the whole run again: the owner stays the insert's.
    b.transact(lambda tx: tx.put_record("runs", "r3", {"status": "queued", "owner": "ann"}))
    b.transact(lambda tx: tx.put_record("runs", "r1", encode_record(
        {"status": "awaiting_approval", "owner": "ann", "agent": "a"})))  # fmt: skip
    assert _runs(b, ["ann"], where={"status": ["awaiting_approval"]}) == ["r1"]
    assert _runs(b, ["ann"], where={"status": ["queued"]}) == ["r3"]
    b.transact(lambda tx: tx.delete_records("runs", ["r1", "r3"]))
    assert _runs(b, ["ann"]) == ["r4"]
    b.transact(lambda tx: tx.put_record("runs", "r1", {"status": "queued", "owner": "bob"}))
    assert _runs(b, ["bob"]) == ["r1", "r2"]  # a new record of the key: its own owner
