"""A redelivery held back by a tool's Retry-After hold keeps saying an attempt ran.

Found by the chaos run: a worker charged a refund and was killed before its answer;
when the task was delivered again while the tool was held back (another task's 503
with Retry-After), the ledger said ``queued``, as if nothing had run. The agent
cancelled the "queued" task, yet it had been charged.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.backends import LEASE_SECONDS
from agentq.faults import WorkerCrash
from agentq.ledger import TaskStatus
from agentq.retry import RetryLater


class Pay(BaseModel):
    name: str


charged_ids: list[str] = []


@tool(queue="pay")
def pay(ctx: ToolContext, args: Pay) -> None:
    if args.name == "throttled":
        raise RetryLater(3600, "503 from the payments API")
    charged_ids.append(ctx.task_id)


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    charged_ids.clear()
    runtime = Runtime(backend_url, tools=[pay], clock=clock)
    yield runtime
    runtime.close()


def test_a_held_back_redelivery_of_a_task_that_ran_is_not_reported_queued(
    rt: Runtime, clock: FakeClock
) -> None:
    charged = rt.enqueue_action("pay", {"name": "charged"})
    # The handler charges, then its worker dies before the completion commits.
    rt.faults.arm("after_external_call", WorkerCrash())
    rt.worker().drain()
    assert charged_ids == [charged.task_id]
    assert rt.task(charged.task_id).status == TaskStatus.RUNNING
    # Another task of the tool is throttled: the tool is held back for an hour.
    rt.enqueue_action("pay", {"name": "throttled"})
    rt.worker().drain()
    # The lease lapses and the charged task is delivered again, into the hold.
    clock.advance(LEASE_SECONDS + 60)
    rt.worker().drain()
    info = rt.task(charged.task_id)
    assert info.attempt == 2  # held back: the next attempt waits for the hold
    assert info.status != TaskStatus.QUEUED, "an attempt ran (and charged): not 'queued'"
    assert info.status == TaskStatus.RETRY_SCHEDULED


def test_a_held_back_first_delivery_stays_queued(rt: Runtime, clock: FakeClock) -> None:
    rt.enqueue_action("pay", {"name": "throttled"})
    rt.worker().drain()
    waiting = rt.enqueue_action("pay", {"name": "never-ran"})
    rt.worker().drain()
    info = rt.task(waiting.task_id)
    assert charged_ids == []
    assert info.status == TaskStatus.QUEUED  # nothing of it ran: it is still just queued
