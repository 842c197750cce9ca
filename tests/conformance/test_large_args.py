"""Large task arguments out of band, on every backend: only the record API
(put, get, read, delete) is used, so each backend stores them the same way."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import Runtime, ToolContext, tool
from agentq.ledger import Tables, TaskStatus

from .conftest import Harness

SEEN: list[str] = []


class Blob(BaseModel):
    data: str


@tool(queue="blobs")
def keep(ctx: ToolContext, args: Blob) -> dict[str, Any]:
    SEEN.append(args.data)
    return {"n": len(args.data)}


@pytest.mark.needs("state", "fake_time")
def test_large_arguments_reach_the_handler_and_go_with_the_pruned_task(harness: Harness) -> None:
    SEEN.clear()
    rt = Runtime(harness.backend, tools=[keep])
    data = "ü" + "x" * 9000
    done = rt.enqueue_action("keep", {"data": data})
    cancelled = rt.enqueue_action("keep", {"data": "y" * 9000})
    assert done.args_ref is not None
    rows = harness.backend.read_records(Tables.PAYLOADS, [done.task_id, cancelled.task_id])
    assert set(rows) == {done.task_id, cancelled.task_id}
    rt.cancel(cancelled.task_id, by="test")
    rt.worker(queues=["blobs"]).drain()
    assert [data] == SEEN
    assert rt.task(done.task_id).status == TaskStatus.SUCCEEDED
    # Kept while the finished tasks are, so they show their arguments...
    assert rt.task(done.task_id).args == {"data": data}
    assert rt.task(cancelled.task_id).args == {"data": "y" * 9000}
    # ... and deleted with them.
    harness.clock.advance(timedelta(days=8))
    assert rt.prune().counts.payloads == 2
    assert harness.backend.read_records(Tables.PAYLOADS, [done.task_id, cancelled.task_id]) == {}
