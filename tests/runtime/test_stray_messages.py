"""Rows written into a queue table around agentq (defect 8 of issue 9).

Another program can put anything into a queue table: text that is not
JSON, a key of the wrong type, a copy of a real task's message. Such rows are
recorded in the dead-letter queue as stray entries with their reason (never
under a real task's id, never changing a real task) and never starve the good
task leased beside them; ``drain()`` never raises for them. A well-formed
message whose task awaits approval, is finished or cancelled, or is at another
attempt, is stale: acked, counted, and the task left as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import Decision, FakeClock, Runtime, TaskInfo, TaskStatus, ToolContext, tool
from agentq.clock import to_micros
from agentq.envelope import envelope_payload
from tests.runtime.conftest import queue_table, types_key_columns

RAN: list[str] = []


class Arg(BaseModel):
    name: str


@tool(queue="work")
def job(ctx: ToolContext, args: Arg) -> Arg:
    RAN.append(args.name)
    return args


@tool(queue="work", requires_approval=True)
def guarded(ctx: ToolContext, args: Arg) -> Arg:
    RAN.append(args.name)
    return args


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    RAN.clear()
    runtime = Runtime(backend_url, tools=[job, guarded], clock=clock)
    yield runtime
    runtime.close()


def insert_row(rt: Runtime, task_id: Any, attempt: Any, payload: Any) -> None:
    """Write a message row the way another program would: plain SQL into the
    queue's table, bypassing every check of the queue API."""
    now = to_micros(rt.clock.now())
    rt.transact(
        lambda tx: tx.execute(
            f"INSERT INTO {queue_table(rt, 'work')} (task_id, attempt, payload, deliver_time, "
            "agentq_visible_at, agentq_lease_seq) VALUES (?, ?, ?, ?, ?, 0)",
            (task_id, attempt, payload, now, now),
        )
    )


def envelope(task: TaskInfo, **changes: Any) -> str:
    rec = json.loads(task.model_dump_json()) | {"created_at": task.created_at.isoformat()}
    return json.dumps(envelope_payload(rec | changes))


def records(rt: Runtime) -> dict[str, dict[str, Any]]:
    return {t.task_id: t.model_dump() for t in rt.tasks()}


def test_bad_rows_are_dead_lettered_as_strays_and_never_starve_the_good_task(
    rt: Runtime, clock: FakeClock
) -> None:
    finished = rt.enqueue_action("job", {"name": "finished"})
    rt.worker().drain()
    RAN.clear()
    queued = rt.transact(
        lambda tx: tx.schedule("job", {"name": "later"}, at=tx.now + timedelta(days=365))
    )
    good = rt.enqueue_action("job", {"name": "good"})
    insert_row(rt, "tsk_junk_text", 1, "this is not JSON {")  # text, not JSON
    insert_row(rt, 5, 1, "{}")  # an int task id (text '5' on PostgreSQL), no envelope
    # A key the queue API cannot name, where the engine stores one (PostgreSQL's
    # bigint column refuses the text 'two').
    wrong_type = not types_key_columns(rt)
    if wrong_type:
        insert_row(rt, "tsk_junk_attempt", "two", envelope(good, task_id="tsk_junk_attempt"))
    insert_row(rt, finished.task_id, 2, "garbage")  # under a finished task's id
    insert_row(rt, queued.task_id, 9, "[1, 2]")  # under a queued task's id
    strays = 5 if wrong_type else 4
    before = records(rt)
    worker = rt.worker()
    worker.drain()  # must not raise
    assert RAN == ["good"]
    assert rt.task(good.task_id).status == TaskStatus.SUCCEEDED
    after = records(rt)
    for task_id in (finished.task_id, queued.task_id):
        assert after[task_id] == before[task_id]  # real tasks are untouched
    dead = rt.dead_letters()
    assert {d["kind"] for d in dead} == {"stray"}
    assert all(d["task_id"] is None for d in dead)  # never a real task's entry
    assert len(dead) == strays
    reasons = " | ".join(d["error"] for d in dead)
    assert "not JSON" in reasons or "corrupt envelope" in reasons
    assert ("key" in reasons) == wrong_type  # a key of the wrong type is named as such
    assert worker.stats["stray"] == strays
    # Each was acked, the one whose key has the wrong type (attempt 'two', where
    # the engine stores one) too: by its key as stored (issue 27, item 16; it
    # used to stay, dead-lettered again at every lease).
    assert all(d["acked"] for d in dead)
    assert rt.backend.stats("work").depth == 1  # the scheduled task only
    assert worker.stats["succeeded"] == 1
    clock.advance(3600)  # past any lease and backoff: nothing comes back
    again = rt.worker()
    again.drain()
    assert again.stats["stray"] == 0 and len(rt.dead_letters()) == strays


def test_a_message_for_a_task_awaiting_approval_is_dropped_as_stale(rt: Runtime) -> None:
    waiting = rt.enqueue_action("guarded", {"name": "needs-a-human"})
    assert waiting.status == TaskStatus.AWAITING_APPROVAL
    good = rt.enqueue_action("job", {"name": "good"})
    rt.transact(lambda tx: tx.tx.send("work", (waiting.task_id, 1), json.loads(envelope(waiting))))
    before = rt.task(waiting.task_id)
    worker = rt.worker()
    worker.drain()
    assert rt.task(waiting.task_id) == before  # still awaiting approval, nothing changed
    assert rt.dead_letters() == []
    assert worker.stats["stale_message"] == 1
    assert rt.task(good.task_id).status == TaskStatus.SUCCEEDED
    assert RAN == ["good"]
    assert rt.backend.stats("work").depth == 0  # the stray message was acked
    # Approving still works: the task runs once.
    rt.approve(before.approval_id or "", by="alice")
    rt.worker().drain()
    assert RAN == ["good", "needs-a-human"]


@pytest.mark.parametrize("status", ["succeeded", "cancelled", "other-attempt"])
def test_a_well_formed_stale_message_is_acked_and_changes_nothing(rt: Runtime, status: str) -> None:
    if status == "succeeded":
        task = rt.enqueue_action("job", {"name": "t"})
        rt.worker().drain()
        key_attempt = task.attempt
    elif status == "cancelled":
        task = rt.transact(
            lambda tx: tx.schedule("job", {"name": "t"}, at=tx.now + timedelta(days=365))
        )
        rt.cancel(task.task_id)
        key_attempt = 1
    else:
        task = rt.transact(
            lambda tx: tx.schedule("job", {"name": "t"}, at=tx.now + timedelta(days=365))
        )
        key_attempt = 3
    task = rt.task(task.task_id)

    def send_copy(tx: Decision) -> None:
        tx.tx.send(
            "work", (task.task_id, key_attempt), json.loads(envelope(task, attempt=key_attempt))
        )

    rt.transact(send_copy)
    before = rt.task(task.task_id)
    RAN.clear()
    worker = rt.worker()
    worker.drain()
    assert RAN == []
    assert rt.task(task.task_id) == before
    assert worker.stats["stale_message"] == 1
    assert rt.dead_letters() == []


def test_a_tasks_own_message_damaged_in_place_dead_letters_that_task(rt: Runtime) -> None:
    """The current attempt's key is unique in its queue, so a row under it is the
    task's own delivery: damaged in place, the task goes to the dead-letter queue
    (replayable from its ledger record) instead of waiting for a message forever."""
    task = rt.enqueue_action("job", {"name": "damaged"})
    good = rt.enqueue_action("job", {"name": "good"})
    rt.transact(
        lambda tx: tx.execute(
            f"UPDATE {queue_table(rt, 'work')} SET payload = ? WHERE task_id = ?",
            (b"garbage", task.task_id),
        )
    )
    worker = rt.worker()
    worker.drain()
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.DEAD and "corrupt envelope" in (info.error or "")
    [dead] = rt.dead_letters()
    assert dead["task_id"] == task.task_id and dead["kind"] == "task"
    assert rt.task(good.task_id).status == TaskStatus.SUCCEEDED
    rt.replay(task.task_id)
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert RAN == ["good", "damaged"]


def test_a_corrupt_row_under_a_task_waiting_behind_its_ordering_key_is_a_stray(
    rt: Runtime,
) -> None:
    """A task waiting behind its ordering key has no message yet: a row under its
    key is someone else's, so it is a stray and the waiting task is untouched."""
    _first, waiting = rt.transact(
        lambda tx: [tx.enqueue("job", {"name": n}, ordering_key="k") for n in ("first", "second")]
    )
    insert_row(rt, waiting.task_id, 1, "garbage")
    worker = rt.worker()
    worker.drain()
    assert worker.stats["stray"] == 1
    [dead] = rt.dead_letters()
    assert dead["kind"] == "stray" and waiting.task_id in dead["message_key"]
    assert RAN == ["first", "second"]  # in order, the second once the first finished
    assert rt.task(waiting.task_id).status == TaskStatus.SUCCEEDED


def test_a_claim_that_fails_unexpectedly_does_not_hold_up_the_batch(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever goes wrong deciding one message (here a simulated bug), the others
    leased with it are claimed and run now, not after their leases expire."""
    from agentq.executor.admission import Admission

    tasks = rt.transact(lambda tx: [tx.enqueue("job", {"name": f"n{i}"}) for i in range(3)])
    victim = tasks[1].task_id
    real = Admission._claim_one
    monkeypatch.setattr(rt.backend, "swaps_in_sets", False)  # every claim in a transaction

    def claim_one(self: Admission, tx: Decision, msg: Any, labels: list[str]) -> Any:
        if msg.key[0] == victim:
            raise RuntimeError("a bug deciding this one message")
        return real(self, tx, msg, labels)

    monkeypatch.setattr(Admission, "_claim_one", claim_one)
    rt.worker().drain()
    assert sorted(RAN) == ["n0", "n2"]
    assert rt.task(victim).status == TaskStatus.QUEUED  # left to redelivery
