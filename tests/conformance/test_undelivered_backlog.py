"""``Backend.undelivered_backlog``: a task queue's messages no worker has
leased, counted by their tasks' tools in the database (issue 38 item 1: the
per-tool figures and an agent's counts during a backlog, without reading it)."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.backends import BacklogGroup
from agentq.envelope import task_queue_spec
from agentq.errors import QueueNotFound
from agentq.ledger import Tables

from .conftest import Harness


def _task(tool: str, owner: str | None, status: str, created_at: str) -> dict[str, Any]:
    rec: dict[str, Any] = {"tool": tool, "status": status, "created_at": created_at}
    if owner is not None:
        rec["created_by"] = owner
    return rec


def _groups(found: list[BacklogGroup]) -> dict[str | None, tuple[int, str | None]]:
    return {g.tool: (g.count, g.oldest_created_at) for g in found}


@pytest.mark.needs("state")
def test_the_backlog_counts_the_unleased_tasks_by_tool(harness: Harness) -> None:
    """Queued tasks of two tools and two owners, one in a rare status (left
    out: its record is read anyway), one message without a record (left out),
    one task of another table under the same key (not a task), then leased
    ones (left out: they may be running). Spanner, whose queues keep their
    leases to themselves, counts every message as delivered: no group."""
    b = harness.backend
    spec = task_queue_spec(harness.table("backlog"))
    b.create_queue(spec)
    p = harness.table_prefix
    tasks = {
        f"{p}t1": _task("ship", "alice", "queued", "2026-01-01T00:00:03+00:00"),
        f"{p}t2": _task("ship", "bob", "queued", "2026-01-01T00:00:01+00:00"),
        f"{p}t3": _task("bill", "alice", "queued", "2026-01-01T00:00:02+00:00"),
        f"{p}t4": _task("ship", "alice", "waiting", "2026-01-01T00:00:00+00:00"),
        f"{p}t6": _task("bill", None, "queued", "2026-01-01T00:00:05+00:00"),
    }

    def fill(tx: Any) -> None:
        for key, rec in tasks.items():
            tx.put_record(Tables.TASKS, key, rec)
        tx.put_record(Tables.APPROVALS, f"{p}t5", _task("ship", "alice", "pending", "x"))
        for n in range(1, 7):  # t5: a message whose task has no record
            tx.send(spec.name, (f"{p}t{n}", 1), {})

    b.transact(fill)
    if harness.kind.startswith("spanner"):
        assert b.undelivered_backlog(spec.name) == []
        assert b.undelivered_backlog(spec.name, owner="alice", oldest=False) == []
        return
    assert _groups(b.undelivered_backlog(spec.name)) == {
        "bill": (2, "2026-01-01T00:00:02+00:00"),
        "ship": (2, "2026-01-01T00:00:01+00:00"),
    }
    assert [g.tool for g in b.undelivered_backlog(spec.name)] == ["bill", "ship"]  # sorted
    assert _groups(b.undelivered_backlog(spec.name, owner="alice")) == {
        "bill": (1, "2026-01-01T00:00:02+00:00"),
        "ship": (1, "2026-01-01T00:00:03+00:00"),
    }
    assert b.undelivered_backlog(spec.name, owner="carol") == []
    assert _groups(b.undelivered_backlog(spec.name, owner="alice", oldest=False)) == {
        "bill": (1, None), "ship": (1, None)}  # fmt: skip
    leased = {str(m.key[0]) for m in next(iter(b.stream(spec.name, 3)))}
    assert leased
    left = [k for k in (f"{p}t1", f"{p}t2", f"{p}t3", f"{p}t6") if k not in leased]
    expected: dict[str | None, tuple[int, str | None]] = {}
    for key in left:
        count, oldest = expected.get(tasks[key]["tool"], (0, None))
        created = tasks[key]["created_at"]
        expected[tasks[key]["tool"]] = (count + 1, min(created, oldest or created))
    assert _groups(b.undelivered_backlog(spec.name)) == expected


@pytest.mark.needs("state")
def test_the_backlog_of_an_unknown_queue_is_refused(harness: Harness) -> None:
    with pytest.raises(QueueNotFound):
        harness.backend.undelivered_backlog(harness.table("nowhere"))
