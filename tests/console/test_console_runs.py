"""Durable agent runs in the console (issue 37): the runs list (newest first,
keyset-paged, filtered, owners' rule), a run's timeline (turns with tokens and
latency, the model's text, each call's task, approval, timers and outcome), its
Cancel button, and the conversation behind an approval of a run's call. The
model is the scripted OpenAI-compatible server on loopback; its output is
untrusted and must show as text. Over real HTTP on loopback."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.console._need import need_ui

need_ui()

from agentq import (  # noqa: E402
    Agent,
    FakeClock,
    OpenAICompatibleModel,
    RunStatus,
    Runtime,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from agentq.policies import ApprovalRule, Defaults, Policy  # noqa: E402
from agentq.testing import ModelRequest, Reply, ScriptedModel  # noqa: E402
from tests.console.conftest import Served, csrf_of, notify, page  # noqa: E402

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
ESCAPED = "&lt;script&gt;window.__pwned=1&lt;/script&gt;"


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="run_tools")
def execute_refund(ctx: ToolContext, args: Refund) -> dict[str, Any]:
    """Refund an order."""
    return {"refunded": args.amount, "order_id": args.order_id}


def answer(request: ModelRequest) -> Reply:
    """A user's message: refund the amount it names, saying so with markup of its
    own; the refund's result: answer, with markup too."""
    if request.messages[-1].get("role") == "tool":
        return Reply.text(f"Refunded <b>{request.turn}</b> {HOSTILE}", usage=(200, 10))
    found = re.search(r"\d+", request.last_user_text() or "")
    amount = float(found[0]) if found else 1.0
    return Reply.tool_calls(("execute_refund", {"order_id": "o1", "amount": amount}),
                            content=f"Refunding {HOSTILE}", usage=(120, 30))  # fmt: skip


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(answer) as scripted:
        yield scripted


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock, model: ScriptedModel) -> Iterator[Runtime]:
    """The console's runtime (conftest's ``serve`` takes it), with an agent."""
    agent = Agent("refunds", OpenAICompatibleModel(model.base_url, "scripted"),
                  instructions="You refund orders.", tools=["execute_refund"])  # fmt: skip
    policy = Policy(
        defaults=Defaults(notify_tool="notify", escalation_tool="page"),
        approvals=(ApprovalRule(tool="execute_refund", field="amount", above=100),),
    )
    runtime = Runtime(f"sqlite:///{tmp_path / 'console.db'}", tools=[execute_refund, notify, page],
                      agents=[agent], policies=policy, clock=clock)  # fmt: skip
    yield runtime
    runtime.close()


def drain(rt: Runtime) -> None:
    rt.worker(receive_timeout=0.05).drain()


def _inert(html: str, where: str) -> None:
    assert "<script>window.__pwned" not in html, where
    assert "<img src=x" not in html, where
    assert ESCAPED in html, where


def test_the_runs_list_is_newest_first_filtered_and_paged(
    serve: Callable[..., Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentq.console import run_views

    served = serve()
    rt = served.rt
    ids = []
    for n in range(5):
        ids.append(rt.start_run("refunds", f"Refund {n + 1}", by="agent").run_id)
        rt.clock.advance(1)  # type: ignore[attr-defined]
    drain(rt)  # every one refunds at most 5: done
    parked = rt.start_run("refunds", "Refund 500", by="agent").run_id
    drain(rt)
    assert rt.run(parked).status is RunStatus.AWAITING_APPROVAL
    monkeypatch.setattr(run_views, "RUN_PAGE", 4)
    with served.client("agent") as client:
        first = client.get("/runs")
        assert first.status_code == 200 and 'id="nav-runs"' in first.text
        listed = re.findall(r'data-run="([^"]+)"', first.text)
        assert listed == [parked, *ids[::-1][:3]]  # newest first, four to a page
        older = re.search(r'id="older" href="([^"]+)"', first.text)
        assert older is not None
        second = client.get(older[1].replace("&amp;", "&").removeprefix("/console"))
        assert re.findall(r'data-run="([^"]+)"', second.text) == ids[1::-1]
        assert 'id="older"' not in second.text
        waiting = client.get("/runs?status=awaiting_approval").text
        assert re.findall(r'data-run="([^"]+)"', waiting) == [parked]
        assert "Refund 500" in waiting and 'class="status awaiting_approval"' in waiting
        assert '<option value="refunds">refunds</option>' in first.text  # the agent filter
        by_agent = client.get("/runs?agent=refunds&status=awaiting_approval").text
        assert re.findall(r'data-run="([^"]+)"', by_agent) == [parked]
        assert re.findall(r'data-run="([^"]+)"', client.get("/runs?agent=nobody").text) == []
        assert client.get("/runs?status=sleeping").status_code == 400


def test_another_principals_run_is_404_and_unlisted(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    mine = rt.start_run("refunds", "Refund 5", by="agent")
    other = rt.start_run("refunds", "Refund 6", by="alice")
    drain(rt)
    with served.client("agent") as agent:
        listed = agent.get("/runs").text
        assert mine.run_id in listed and other.run_id not in listed
        assert agent.get(f"/runs/{mine.run_id}").status_code == 200
        assert agent.get(f"/runs/{other.run_id}").status_code == 404
        assert agent.get("/runs/run_nope").status_code == 404
        # Not an operator: no Cancel button, and the action is refused.
        page_ = agent.get(f"/runs/{mine.run_id}").text
        assert 'id="cancel-run-form"' not in page_
    with served.client("viewer") as viewer:  # operate: everyone's
        listed = viewer.get("/runs").text
        assert mine.run_id in listed and other.run_id in listed
        assert viewer.get(f"/runs/{other.run_id}").status_code == 200
    with served.client("carol") as carol:  # approve only: no runs to read
        assert carol.get("/runs").status_code == 403


def test_a_runs_timeline_shows_turns_calls_and_their_outcomes_as_text(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    run = rt.start_run("refunds", f"Refund 40 {HOSTILE}", by="agent")
    drain(rt)
    done = rt.run(run.run_id)
    assert done.status is RunStatus.SUCCEEDED
    call_task = str(done.turns[0].calls[0].task_id)
    with served.client("agent") as client:
        html = client.get(f"/runs/{run.run_id}").text
    _inert(html, "the run page")
    assert 'id="run-status">succeeded<' in html
    turns = re.findall(r'<li class="turn [a-z]+" data-turn="(\d+)"', html)
    assert turns == ["1", "2"]
    assert "120 / 30 / 150 tokens" in html and "200 / 10 / 210 tokens" in html
    assert 'class="latency"' in html
    assert f"Refunding {ESCAPED}" in html  # the model's text, escaped
    assert f"Refund 40 {ESCAPED}" in html  # the user's
    assert "Refunded &lt;b&gt;2&lt;/b&gt;" in html and "<b>" not in html
    assert f'href="/console/tasks/{call_task}"' in html
    assert 'class="status succeeded call-status"' in html
    assert "&#34;refunded&#34;: 40.0" in html  # the call's output
    assert 'id="run-tokens">360 ' in html


def test_an_approver_sees_the_conversation_and_the_run_its_timers(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    run = rt.start_run("refunds", f"Refund 500 {HOSTILE}", by="agent")
    drain(rt)
    (approval,) = rt.approvals("pending")
    with served.client("carol") as carol:  # approves; reads no runs
        inbox = carol.get("/approvals").text
    _inert(inbox, "the approvals inbox")
    article = inbox.split(f'data-approval="{approval.approval_id}"', 1)[1]
    assert "the conversation that led to this call" in article
    roles = re.findall(r'data-role="([a-z]+)"', article)
    assert roles == ["user", "assistant"]
    assert f"Refund 500 {ESCAPED}" in article and f"Refunding {ESCAPED}" in article
    assert 'class="call this"' in article and "execute_refund" in article
    with served.client("root") as root:
        html = root.get(f"/runs/{run.run_id}").text
    assert 'class="status pending approval-status"' in html and "escalates" in html
    assert re.search(r'<li data-timer="tsk_[0-9a-f]+"><a [^>]*>escalation</a>', html), html
    assert 'class="status awaiting_approval call-status"' in html


def test_the_conversation_of_a_later_turn_has_the_tool_results(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    run = rt.start_run("refunds", "Refund 50", by="agent")
    drain(rt)
    # The user asks for more: the second answer's call needs a human this time.
    rt.send_message(run.run_id, "And 700 more", by="agent")
    drain(rt)
    (approval,) = rt.approvals("pending")
    with served.client("olga") as olga:
        inbox = olga.get("/approvals").text
    article = inbox.split(f'data-approval="{approval.approval_id}"', 1)[1]
    assert re.findall(r'data-role="([a-z]+)"', article) == [
        "user", "assistant", "tool", "assistant", "user", "assistant"]  # fmt: skip
    assert "refunded" in article and "And 700 more" in article


def test_an_operator_cancels_a_run_with_its_csrf_token(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    run = rt.start_run("refunds", "Refund 500", by="agent")
    drain(rt)
    call_task = str(rt.run(run.run_id).turns[0].calls[0].task_id)
    with served.client("viewer") as viewer:
        html = viewer.get(f"/runs/{run.run_id}").text
        assert 'id="cancel-run-form"' in html
        refused = viewer.post(f"/runs/{run.run_id}/cancel", data={"csrf_token": "forged"})
        assert refused.status_code == 403
        assert rt.run(run.run_id).status is RunStatus.AWAITING_APPROVAL
        r = viewer.post(f"/runs/{run.run_id}/cancel",
                        data={"csrf_token": csrf_of(html), "note": "duplicate ticket"})  # fmt: skip
        assert r.status_code == 303 and r.headers["location"].endswith(f"/runs/{run.run_id}")
        again = viewer.get(f"/runs/{run.run_id}").text
        assert "cancelled run" in again and 'id="run-status">cancelled<' in again
        assert 'id="cancel-run-form"' not in again
        twice = viewer.post(f"/runs/{run.run_id}/cancel", data={"csrf_token": csrf_of(again)})
        assert twice.status_code == 409
        assert viewer.post("/runs/run_nope/cancel",
                           data={"csrf_token": csrf_of(again)}).status_code == 404  # fmt: skip
    cancelled = rt.run(run.run_id)
    assert cancelled.status is RunStatus.CANCELLED and "duplicate ticket" in str(cancelled.error)
    assert rt.task(call_task).status is TaskStatus.CANCELLED and rt.approvals("pending") == []
    [entry] = [e for e in rt.audit_log() if e.target == run.run_id]
    assert (entry.actor, entry.action, entry.note) == ("viewer", AuditAction.CANCEL,
                                                       "duplicate ticket")  # fmt: skip
    with served.client("agent") as agent:  # its owner, without operate: refused
        html = agent.get(f"/tasks/{call_task}").text
        r = agent.post(f"/runs/{run.run_id}/cancel", data={"csrf_token": csrf_of(html)})
        assert r.status_code == 403


def test_a_read_only_console_shows_runs_without_a_cancel(serve: Callable[..., Served]) -> None:
    served = serve(read_only=True)
    run = served.rt.start_run("refunds", "Refund 500", by="agent")
    with served.client("root") as root:
        html = root.get(f"/runs/{run.run_id}").text
        assert 'id="cancel-run-form"' not in html
        assert "waiting for a worker" in html and 'id="next-turn-task"' in html
