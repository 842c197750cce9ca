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


def _runs(b: Any, agents: list[Any], **kw: Any) -> list[str]:
    where = {"agent": agents, **kw.pop("where", {})}
    return [k for k, _ in b.list_records("runs", where=where, **kw)]


def _run(status: str, agent: Any, owner: str = "ann", **more: Any) -> dict[str, Any]:
    return {"status": status, "agent": agent, "owner": owner, "messages": [], **more}


@pytest.mark.needs("state")
def test_a_listing_of_an_agents_runs_follows_every_kind_of_write(harness: Harness) -> None:
    """A durable run's agent (its ``agent``, set when it starts) is kept in the
    tool column too (``GET /v1/runs?agent=...``, the console's and ``agentq
    runs``' agent filter): whatever the path (the tool index, an owner's, the
    rare statuses'), the listing says what the runs say, through each write a
    run goes through (start, turns, parks, its end)."""
    b = harness.backend

    def start(tx: Any) -> None:
        tx.put_record("runs", "r1", _run("queued", "helper"))
        tx.insert_record("runs", "r2", _run("queued", "triage", owner="bob"))
        tx.put_record("runs", "r3", encode_record(_run("queued", "helper", owner="bob")))
        # A run's "tool" (no run has one) is not its agent.
        tx.put_record("runs", "r4", encode_record(_run("queued", "helper", tool="triage")))
        tx.put_record("runs", "r5", _run("queued", 7))  # not a string
        tx.put_record("runs", "r6", {"status": "queued", "owner": "ann"})  # no agent
        tx.put_record("tasks", "t1", {"status": "queued", "tool": "helper", "agent": "helper"})

    b.transact(start)
    assert _runs(b, ["helper"]) == ["r1", "r3", "r4"]
    assert _runs(b, ["helper", "triage"], descending=True, limit=2) == ["r4", "r3"]
    assert _runs(b, ["helper"], after="r3", descending=True) == ["r1"]
    assert _runs(b, ["helper"], after="r1", limit=1) == ["r3"]
    assert _runs(b, ["helper", None]) == ["r1", "r3", "r4", "r6"]
    assert _runs(b, ["nobody"]) == [] and _runs(b, []) == []
    assert _runs(b, ["triage"]) == ["r2"]
    assert _runs(b, ["helper"], where={"owner": ["bob"]}) == ["r3"]
    assert _runs(b, ["helper"], where={"status": ["queued"]}, descending=True) == [
        "r4", "r3", "r1"]  # fmt: skip
    assert [k for k, _ in b.list_records("tasks", where={"agent": ["helper"]})] == ["t1"]
    assert [k for k, _ in b.list_records("runs", where={"tool": ["triage"]})] == ["r4"]

    # Each turn writes the whole run again, with the agent it started with.
    versions = b.read_records("runs", ["r1", "r2"])
    b.transact(lambda tx: tx.replace_records("runs", [
        ("r1", versions["r1"].version, _run("awaiting_tools", "helper", turn=1)),
        ("r2", versions["r2"].version, _run("awaiting_approval", "triage", owner="bob")),
    ]))  # fmt: skip
    b.transact(lambda tx: tx.put_record("runs", "r3", encode_record(
        _run("succeeded", "helper", owner="bob", output="done"))))  # fmt: skip
    b.transact(lambda tx: tx.put_record("runs", "r4", _run("cancelled", "helper", tool="triage",
                                                           error="cancelled")))  # fmt: skip
    assert _runs(b, ["helper"]) == ["r1", "r3", "r4"]
    assert _runs(b, ["helper"], where={"status": ["awaiting_tools", "awaiting_approval"]}) == [
        "r1"]  # fmt: skip
    assert _runs(b, ["helper", "triage"], where={"status": ["awaiting_approval"]}) == ["r2"]
    assert _runs(b, ["helper"], where={"status": ["succeeded"]}) == ["r3"]
    assert _runs(b, ["helper"], where={"status": ["cancelled"], "owner": ["ann"]}) == ["r4"]
    assert _runs(b, ["helper"], where={"status": ["queued"]}) == []
    assert _runs(b, ["helper"], where={"owner": ["ann", "bob"]}, descending=True) == [
        "r4", "r3", "r1"]  # fmt: skip
    # The next turn, then the end.
    b.transact(lambda tx: tx.put_record("runs", "r1", _run("queued", "helper", turn=2)))
    assert _runs(b, ["helper"], where={"status": ["queued"]}) == ["r1"]
    b.transact(lambda tx: tx.put_record("runs", "r1", _run("succeeded", "helper", turn=2)))
    assert _runs(b, ["helper"], where={"status": ["succeeded"]}, descending=True) == ["r3", "r1"]

    b.transact(lambda tx: tx.delete_records("runs", ["r1", "r3"]))
    assert _runs(b, ["helper"]) == ["r4"]
    b.transact(lambda tx: tx.put_record("runs", "r1", _run("queued", "triage")))
    assert _runs(b, ["triage"]) == ["r1", "r2"]  # a new record of the key: its own agent
    assert _runs(b, ["helper"]) == ["r4"]
