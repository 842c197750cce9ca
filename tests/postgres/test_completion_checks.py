"""A worker's completion on PostgreSQL is one pipelined transaction (issue 38,
item 2): its acks are checked in SQL, the outcomes are written from the records
as claimed (a compare-and-swap, no re-read), and the tasks waiting on them are
looked for only when one exists. Each guess that turns out wrong must cost a
re-run, never a guarantee: a stale completion records nothing, a record changed
since its claim keeps that change, a waiter registered while its prerequisite
ran is released."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import FakeClock, Runtime, TaskStatus, ToolContext, tool  # noqa: E402
from agentq.backends import Transaction  # noqa: E402
from agentq.ledger import Tables  # noqa: E402

#: What the handler does while it runs (set by each test).
DURING: list[Callable[[str], None]] = []


class Args(BaseModel):
    n: int


@tool(queue="work")
def busy(ctx: ToolContext, args: Args) -> int:
    for fn in DURING:
        fn(ctx.task_id)
    return args.n


@pytest.fixture
def rt(postgres_url: str) -> Iterator[Runtime]:
    DURING.clear()
    runtime = Runtime(postgres_url, tools=[busy], clock=FakeClock())
    yield runtime
    runtime.close()


def test_a_completion_whose_message_is_gone_records_nothing(rt: Runtime) -> None:
    ids = [rt.enqueue_action("busy", {"n": n}).task_id for n in range(3)]
    # Another delivery's completion (or a cancel) took the last task's message.
    DURING.append(
        lambda task_id: (
            task_id == ids[2] and rt.backend.transact(lambda tx: tx.ack("work", (task_id, 1)))
        )
    )
    worker = rt.worker(concurrency=3, batch_size=3)
    worker.drain()
    assert [rt.task(t).status for t in ids] == ["succeeded", "succeeded", "running"]
    assert worker.stats["stale_completion"] == 1
    assert "result" not in (rt.backend.get_record(Tables.TASKS, ids[2]) or {})


def test_a_record_changed_since_its_claim_keeps_the_change(rt: Runtime) -> None:
    task_id = rt.enqueue_action("busy", {"n": 1}).task_id

    def note(tx: Transaction) -> None:
        rec = tx.get_record(Tables.TASKS, task_id)
        assert rec is not None
        tx.put_record(Tables.TASKS, task_id, {**rec, "note": "written while it ran"})

    DURING.append(lambda _: rt.backend.transact(note))
    rt.worker().drain()
    rec = rt.backend.get_record(Tables.TASKS, task_id)
    assert rec is not None
    assert (rec["status"], rec["result"], rec["note"]) == (
        TaskStatus.SUCCEEDED,
        1,
        "written while it ran",
    )


def test_a_waiter_registered_while_its_prerequisite_runs_is_released(rt: Runtime) -> None:
    first = rt.enqueue_action("busy", {"n": 1}).task_id
    waiters: list[str] = []

    def wait_on(task_id: str) -> None:
        if task_id == first:
            waiters.append(rt.enqueue_action("busy", {"n": 2}, after=[first]).task_id)

    DURING.append(wait_on)
    rt.worker().drain()
    assert rt.task(first).status == "succeeded"
    assert [rt.task(w).status for w in waiters] == ["succeeded"]


def test_every_task_of_a_group_is_recorded_once(rt: Runtime) -> None:
    ids = [rt.enqueue_action("busy", {"n": n}).task_id for n in range(20)]
    rt.worker(concurrency=4, batch_size=8).drain()
    records: dict[str, Any] = rt.backend.read_records(Tables.TASKS, ids)
    assert [records[t].value["result"] for t in ids] == list(range(20))
    assert {records[t].value["status"] for t in ids} == {"succeeded"}
