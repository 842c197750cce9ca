"""The keyword options of an enqueue are one typed set (``EnqueueOptions``) that
every enqueue path passes on: a misspelt one is still refused at run time, as a
named keyword parameter was, on each path, and nothing is enqueued."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from agentq import Runtime
from agentq.clock import FakeClock
from agentq.decision import EnqueueOptions

ARGS = {"order_id": "o-1", "amount": 5}


def test_a_misspelt_option_is_refused_on_every_enqueue_path(rt: Runtime) -> None:
    misspelt: dict[str, Any] = {"odering_key": "o"}
    paths: list[Callable[[], object]] = [
        lambda: rt.enqueue_action("execute_refund", ARGS, **misspelt),
        lambda: rt.submit("execute_refund", ARGS, **misspelt),
        lambda: rt.transact(lambda tx: tx.enqueue("execute_refund", ARGS, **misspelt)),
        lambda: rt.transact(lambda tx: tx.submit("execute_refund", ARGS, **misspelt)),
        lambda: asyncio.run(rt.aenqueue_action("execute_refund", ARGS, **misspelt)),
    ]
    for path in paths:
        with pytest.raises(TypeError, match=r"'odering_key'.*ordering_key"):
            path()
    assert rt.tasks() == []


def test_the_async_path_passes_the_options_on(rt: Runtime, clock: FakeClock) -> None:
    options: EnqueueOptions = {"ordering_key": "order-1", "delay": 60, "idempotency_key": "call-1"}
    task = asyncio.run(rt.aenqueue_action("execute_refund", ARGS, **options))
    assert task.ordering_key == "order-1"
    assert rt.task(task.task_id).next_attempt_at == clock.now() + timedelta(seconds=60)
    # The retry asks the same (a key names the whole request, options too: issue 27).
    again = rt.submit("execute_refund", ARGS, **options)
    assert again.task.task_id == task.task_id and not again.created
