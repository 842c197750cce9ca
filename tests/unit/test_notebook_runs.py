"""Durable agent runs in a notebook (issue 37): a run shows as HTML (status,
turns with tokens, latency and calls, output; the model's text escaped), and
``rt.run_until_idle()`` drains a run to its answer, stopping at a human's
approval and going through a throttled model's Retry-After on the fake clock.
The model is the scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    Agent,
    FakeClock,
    NotIdle,
    OpenAICompatibleModel,
    RunStatus,
    Runtime,
    ToolContext,
    tool,
)
from agentq.policies import ApprovalRule, Policy
from agentq.testing import Reply, ScriptedModel

HOSTILE = "<script>alert(1)</script>"
SECRET_URL = "https://user:hunter2@api.example.com/v1"


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="notebook_runs")
def nb_refund(ctx: ToolContext, args: Refund) -> dict[str, Any]:
    """Refund an order."""
    return {"refunded": args.amount}


def make(model: ScriptedModel, clock: FakeClock) -> Runtime:
    agent = Agent("nb_refunds", OpenAICompatibleModel(model.base_url, "scripted"),
                  instructions="You refund orders.", tools=["nb_refund"])  # fmt: skip
    policy = Policy(approvals=(ApprovalRule(tool="nb_refund", field="amount", above=100),))
    return Runtime("sqlite:///:memory:", tools=[nb_refund], agents=[agent], policies=policy,
                   clock=clock)  # fmt: skip


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def refunding(amount: float) -> list[Reply]:
    call = ("nb_refund", {"order_id": "o1", "amount": amount})
    return [Reply.tool_calls(call, content=f"On it {HOSTILE}", usage=(100, 20)),
            Reply.text(f"Refunded {HOSTILE} via {SECRET_URL}", usage=(150, 5))]  # fmt: skip


@pytest.fixture
def rt(clock: FakeClock) -> Iterator[Runtime]:
    with ScriptedModel(refunding(40)) as model, make(model, clock) as runtime:
        yield runtime


def test_a_run_shows_its_status_turns_and_output_escaped(rt: Runtime) -> None:
    run = rt.start_run("nb_refunds", f"Refund o1 {HOSTILE}")
    queued = run._repr_html_()
    assert "queued" in queued and "&lt;script&gt;" in queued and "<script>" not in queued
    rt.run_until_idle()
    done = rt.run(run.run_id)
    html = done._repr_html_()
    assert f"run {run.run_id}" in html and ">succeeded<" in html
    assert "<script>" not in html and html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3
    assert "hunter2" not in html  # redacted, as every view's text is
    assert "100 / 20 / 120" in html and "150 / 5 / 155" in html and "250 / 25 / 275" in html
    assert " ms<" in html  # each turn's latency
    call = done.turns[0].calls[0]
    assert f"nb_refund ({call.task_id})" in html and "&quot;amount&quot;: 40.0" in html
    for header in ("turn", "model", "latency", "calls", "text"):
        assert f">{header}</th>" in html


def test_run_until_idle_drains_a_run_to_its_answer_and_stops_at_an_approval(
    clock: FakeClock,
) -> None:
    with ScriptedModel(refunding(500)) as model, make(model, clock) as rt:
        run = rt.start_run("nb_refunds", "Refund 500 on o1")
        report = rt.run_until_idle(until=timedelta(hours=1))
        parked = rt.run(run.run_id)
        # Waiting for a human is idle: only the approval's escalation is due (72 h on).
        assert parked.status is RunStatus.AWAITING_APPROVAL and parked.idle
        assert report.next_due is not None and report.handled >= 1
        (approval,) = rt.approvals("pending")
        rt.approve(approval.approval_id, by="bob")  # its timers go with the decision
        rt.run_until_idle()  # the call, then the next turn
        done = rt.run(run.run_id)
        assert done.status is RunStatus.SUCCEEDED and done.output is not None
        assert model.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}


def test_run_until_idle_waits_out_a_throttled_turn(clock: FakeClock) -> None:
    with ScriptedModel(refunding(40)) as model, make(model, clock) as rt:
        model.fail_next(429, retry_after=30)
        run = rt.start_run("nb_refunds", "Refund o1")
        report = rt.run_until_idle()
        assert rt.run(run.run_id).status is RunStatus.SUCCEEDED
        assert report.advanced.total_seconds() >= 30
        assert model.attempts_per_turn()[(run.run_id, 1)] == 2


def test_run_until_idle_names_a_run_whose_turn_no_worker_here_takes(clock: FakeClock) -> None:
    with ScriptedModel(refunding(40)) as model, make(model, clock) as rt:
        run = rt.start_run("nb_refunds", "Refund o1")
        with pytest.raises(NotIdle, match=run.run_id):
            rt.run_until_idle(queues=["notebook_runs"])  # not the turn's queue
        assert rt.run(run.run_id).status is RunStatus.QUEUED
