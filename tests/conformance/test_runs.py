"""Durable agent runs through the backend contract (issue 37): a run is records
and tasks only, so every backend carries it the same way. The join is the part
a backend's isolation decides: two calls of one turn finishing at once, in two
workers on one database, send the next turn exactly once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import Agent, OpenAICompatibleModel, RunStatus, Runtime, ToolContext, tool
from agentq.testing import Reply, ScriptedModel

from .conftest import Harness

#: Both calls of the turn wait here for each other: they end together.
_TOGETHER = threading.Barrier(2)


class Step(BaseModel):
    n: int


@tool(queue="conformance_runs")
def paired_step(ctx: ToolContext, args: Step) -> dict[str, Any]:
    """One of two calls that finish at the same moment."""
    try:
        _TOGETHER.wait(timeout=10)
    except threading.BrokenBarrierError:
        pass  # leased one after the other (a worker with one slot): still correct
    return {"n": args.n}


def _runtime(backend: Any, model: ScriptedModel) -> Runtime:
    agent = Agent("pair", OpenAICompatibleModel(model.base_url, "scripted"), tools=["paired_step"])
    return Runtime(backend, tools=[paired_step], agents=[agent])


@pytest.mark.needs("state", "fake_time", "threads")
def test_two_calls_ending_at_once_in_two_workers_send_the_next_turn_once(
    harness: Harness,
) -> None:
    _TOGETHER.reset()
    script = [Reply.tool_calls(("paired_step", {"n": 1}), ("paired_step", {"n": 2})),
              Reply.text("both done")]  # fmt: skip
    with ScriptedModel(script) as model:
        a = _runtime(harness.backend, model)
        b = _runtime(harness.reopen(), model)
        try:
            _carry_two_calls_in_two_workers(a, b, model)
        finally:
            a.close()
            b.close()


def _carry_two_calls_in_two_workers(a: Runtime, b: Runtime, model: ScriptedModel) -> None:
    run = a.start_run("pair", "do both")
    a.worker(receive_timeout=0.05, queues=["agent_turns"]).drain()
    assert a.run(run.run_id).status is RunStatus.AWAITING_TOOLS
    workers = [threading.Thread(target=rt.worker(receive_timeout=0.05,
                                                 queues=["conformance_runs"]).drain)
               for rt in (a, b)]  # fmt: skip
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    a.worker(receive_timeout=0.05).drain()
    done = b.run(run.run_id)
    assert done.status is RunStatus.SUCCEEDED, done.error
    assert [t.number for t in done.turns] == [1, 2]
    assert model.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
    results = [m["content"] for m in done.messages if m["role"] == "tool"]
    assert sorted(results) == ['{"n": 1}', '{"n": 2}']


@pytest.mark.needs("state", "fake_time")
def test_a_run_is_records_every_backend_reads_back(harness: Harness) -> None:
    with ScriptedModel([Reply.text("hello")]) as model, _runtime(harness.backend, model) as rt:
        first = rt.start_run("pair", "hi", idempotency_key="k", by="alice")
        again = rt.start_run("pair", "hi", idempotency_key="k", by="alice")
        assert again.run_id == first.run_id
        rt.worker(receive_timeout=0.05).drain()
        (listed,) = rt.runs(owner="alice")
        assert listed.run_id == first.run_id and listed.status is RunStatus.SUCCEEDED
        assert listed.output == "hello" and rt.runs("queued") == []
