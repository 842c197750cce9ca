"""rt.wait on Spanner: this process's commits wake it at once; another process's
commit (written straight into the mock's table) is seen by the bounded re-read
every commit_poll_interval seconds."""

from __future__ import annotations

import json
import threading
from typing import Any

from pydantic import BaseModel

from agentq import FakeClock, Runtime, TaskStatus, ToolContext, open_backend, tool

from .conftest import spanner_url


class Ping(BaseModel):
    n: int


@tool(queue="pings")
def ping(ctx: ToolContext, args: Ping) -> dict[str, int]:
    return {"n": args.n}


def _waiter(rt: Runtime, task_id: str, got: list[Any]) -> threading.Thread:
    thread = threading.Thread(target=lambda: got.append(rt.wait(task_id, 60)))
    thread.start()
    return thread


def test_wait_on_spanner(mock_server: Any, svc: Any) -> None:
    clock = FakeClock()
    backend = open_backend(spanner_url(mock_server[2]), clock=clock)
    rt = Runtime(backend, tools=[ping])
    try:
        assert backend.commit_poll_interval == 0.5
        # This process's commit (a cancel) wakes the wait without time passing.
        first = rt.enqueue_action("ping", {"n": 1})
        got: list[Any] = []
        waiter = _waiter(rt, first.task_id, got)
        clock.wait_for_sleepers(1)
        rt.cancel(first.task_id)
        waiter.join(10)
        assert got[0].status is TaskStatus.CANCELLED

        # Another process's commit: seen at the next re-read, 0.5 s of clock later.
        second = rt.enqueue_action("ping", {"n": 2})
        got.clear()
        waiter = _waiter(rt, second.task_id, got)
        clock.wait_for_sleepers(1)
        rec = json.loads(svc.records[("tasks", second.task_id)])
        svc.records[("tasks", second.task_id)] = json.dumps(
            {**rec, "status": "succeeded", "result": {"n": 2}}
        )
        assert waiter.is_alive()  # nothing told this process
        clock.advance(0.5)
        waiter.join(10)
        assert got[0].status is TaskStatus.SUCCEEDED and got[0].result == {"n": 2}
    finally:
        rt.close()
        backend.close()
