"""Rolling deploys: a task for a tool a worker does not know yet waits for one that does.

Two runtimes share one SQLite file, as an old and a new release do during a
rolling deploy: the new one knows a tool the old one does not, on a queue both
serve. The old worker must leave such a task for the new one (sent again with
a growing delay, counted), and dead-letter it only after a long, configurable
period, saying why.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.ledger import TaskStatus


class Ref(BaseModel):
    ref: str


class Done(BaseModel):
    ok: bool


@tool(queue="work")
def old_tool(ctx: ToolContext, args: Ref) -> Done:
    """Known to both releases."""
    return Done(ok=True)


@tool(queue="work")
def new_tool(ctx: ToolContext, args: Ref) -> Done:
    """Added by the new release."""
    return Done(ok=True)


@pytest.fixture
def releases(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Runtime, Runtime]]:
    db = f"sqlite:///{tmp_path / 'agentq.db'}"
    old = Runtime(db, tools=[old_tool], clock=clock)
    new = Runtime(db, tools=[old_tool, new_tool], clock=clock)
    yield old, new
    new.close()
    old.close()


def test_the_old_worker_leaves_a_new_tools_task_for_the_new_worker(
    releases: tuple[Runtime, Runtime], clock: FakeClock
) -> None:
    old, new = releases
    task = new.enqueue_action("new_tool", {"ref": "r1"})
    old_worker = old.worker()
    for _ in range(3):  # the old worker meets it again and again: never dead-lettered
        old_worker.drain()
        info = new.task(task.task_id)
        assert info.status == TaskStatus.QUEUED, info
        assert info.next_attempt_at is not None and info.next_attempt_at > clock.now()
        clock.advance(timedelta(minutes=10))
    assert old_worker.stats["unknown_tool"] == 3
    assert old.dead_letters() == []
    new.worker().drain()
    done = new.task(task.task_id)
    assert done.status == TaskStatus.SUCCEEDED
    assert done.result == {"ok": True}


def test_the_wait_grows_and_is_bounded_by_the_grace_period(
    releases: tuple[Runtime, Runtime], clock: FakeClock
) -> None:
    old, new = releases
    task = new.enqueue_action("new_tool", {"ref": "r2"})
    worker = old.worker(unknown_tool_grace=timedelta(hours=2))
    delays = []
    while new.task(task.task_id).status != TaskStatus.DEAD:
        assert clock.now() - task.created_at < timedelta(hours=3), "never dead-lettered"
        worker.drain()
        info = new.task(task.task_id)
        if info.next_attempt_at is not None and info.status != TaskStatus.DEAD:
            delays.append(info.next_attempt_at - clock.now())
            clock.advance(info.next_attempt_at - clock.now())
    assert delays == sorted(delays) and delays[0] < delays[-1] <= timedelta(minutes=5)
    dead = new.task(task.task_id)
    assert clock.now() - task.created_at >= timedelta(hours=2)
    assert "unknown tool 'new_tool'" in (dead.error or "")
    assert "no worker that knows it" in (dead.error or "")
    (entry,) = new.dead_letters()
    assert entry["task_id"] == task.task_id


def test_a_grace_of_zero_dead_letters_at_once(
    releases: tuple[Runtime, Runtime], clock: FakeClock
) -> None:
    old, new = releases
    task = new.enqueue_action("new_tool", {"ref": "r3"})
    old.worker(unknown_tool_grace=0).drain()
    assert new.task(task.task_id).status == TaskStatus.DEAD


def test_a_negative_grace_is_refused(releases: tuple[Runtime, Runtime]) -> None:
    old, _ = releases
    with pytest.raises(ValueError, match="unknown_tool_grace"):
        old.worker(unknown_tool_grace=-1)
