"""Tasks held behind their ordering key are counted as queued.

Only a key's active task has a queue message (:mod:`agentq.ordering`); the tasks
behind it are ``queued`` with none. The overview's counts, ``agentq inspect``'s
per-tool figures and the console's read the queued and running tasks from the
queues' messages and count the rest of the ledger as succeeded (issue 38 item
1), so the held ones were counted as succeeded: three tasks of one key showed
as one queued and two succeeded before any had run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, TaskInfo, TaskStatus, ToolContext, overview, tool
from agentq.decision import Decision


class Ship(BaseModel):
    order: str


@tool(queue="shipping")
def ship(ctx: ToolContext, args: Ship) -> dict[str, Any]:
    return {"shipped": args.order}


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(backend_url, tools=[ship], clock=clock)
    yield runtime
    runtime.close()


def _hold_three(rt: Runtime, key: str, by: str = "local") -> list[str]:
    """Three tasks of one ordering key, a minute apart: one sent, two held."""
    clock: FakeClock = rt.clock  # type: ignore[assignment]
    ids = []
    for n in range(3):
        order = {"order": f"{key}-{n}"}

        def enqueue(tx: Decision, order: dict[str, str] = order) -> TaskInfo:
            return tx.enqueue("ship", order, ordering_key=key, by=by)

        ids.append(rt.transact(enqueue).task_id)
        clock.advance(60)
    return ids


def test_tasks_held_behind_their_ordering_key_count_as_queued(rt: Runtime) -> None:
    _hold_three(rt, "cart-1")
    assert [t.status for t in rt.tasks()] == [TaskStatus.QUEUED] * 3
    assert rt.backend.stats("shipping").depth == 1  # only the active task is sent

    assert overview.status_counts(rt.backend) == {"queued": 3}
    counts = {c.tool: c for c in rt.tool_counts()}["ship"]
    assert counts.queued == 3
    # The oldest unfinished task is the first of the key (held ones are not older).
    assert counts.oldest_unfinished_s == pytest.approx(180.0)


def test_a_held_task_counts_as_queued_until_it_runs_then_as_succeeded(rt: Runtime) -> None:
    _hold_three(rt, "cart-2")
    rt.worker(receive_timeout=0.05).drain()
    # Each success sends the next task of the key in its own commit: all ran.
    assert overview.status_counts(rt.backend) == {"succeeded": 3}

    _hold_three(rt, "cart-3")
    assert overview.status_counts(rt.backend) == {"queued": 3, "succeeded": 3}


def test_an_owners_counts_include_its_held_tasks_and_no_one_elses(rt: Runtime) -> None:
    _hold_three(rt, "cart-a", by="alice")
    _hold_three(rt, "cart-b", by="bob")
    assert overview.status_counts(rt.backend, owner="alice") == {"queued": 3}
    assert overview.status_counts(rt.backend) == {"queued": 6}
    held = overview.unfinished_tasks(rt.backend, owner="bob")
    assert sorted(str(r["args"]["order"]) for r in held.values()) == [
        "cart-b-0", "cart-b-1", "cart-b-2",
    ]  # fmt: skip
