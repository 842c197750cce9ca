"""Durable agent runs (issue 37) on every backend: a run's turns are leased tasks,
its calls are tasks keyed by run, turn and position, and the transaction that
ends a turn's last call sends the next turn. The model is the scripted
OpenAI-compatible server on loopback (fresh call ids on every request)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    Agent,
    AgentQError,
    Decision,
    FakeClock,
    IdempotencyConflict,
    IllegalTransition,
    InvalidArguments,
    OpenAICompatibleModel,
    RunNotFound,
    RunStatus,
    Runtime,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.policies import ApprovalRule, Policy
from agentq.testing import Reply, ScriptedModel

CHARGES: list[tuple[str, float]] = []
MARKED: list[str] = []


class Refund(BaseModel):
    order_id: str
    amount: float


class Order(BaseModel):
    order_id: str


@tool(queue="run_tools")
def execute_refund(ctx: ToolContext, args: Refund) -> dict[str, Any]:
    """Refund an order (the payments API, keyed by the task id)."""
    CHARGES.append((ctx.task_id, args.amount))
    return {"refunded": args.amount, "order_id": args.order_id}


@tool(local=True)
def mark_refund_approved(tx: Decision, args: Order) -> dict[str, Any]:
    """Record in the application's own state that the refund is approved."""
    MARKED.append(args.order_id)
    return {"order_id": args.order_id, "state": "refund_approved"}


def refund_call(amount: float = 40.0, order: str = "o1") -> tuple[str, dict[str, Any]]:
    return ("execute_refund", {"order_id": order, "amount": amount})


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel([Reply.tool_calls(refund_call()), Reply.text("Refunded 40.00.")]) as m:
        yield m


def make_runtime(
    backend_url: str, clock: FakeClock, model: ScriptedModel, **agent_options: Any
) -> Runtime:
    agent = Agent(
        "refunds", OpenAICompatibleModel(model.base_url, "scripted"),
        instructions="You refund orders.", tools=["execute_refund", "mark_refund_approved"],
        **agent_options,
    )  # fmt: skip
    policy = Policy(approvals=(ApprovalRule(tool="execute_refund", field="amount", above=100),))
    return Runtime(backend_url, tools=[execute_refund, mark_refund_approved], agents=[agent],
                   policies=policy, clock=clock)  # fmt: skip


@pytest.fixture
def rt(backend_url: str, clock: FakeClock, model: ScriptedModel) -> Iterator[Runtime]:
    CHARGES.clear()
    MARKED.clear()
    runtime = make_runtime(backend_url, clock, model)
    yield runtime
    runtime.close()


def drain(rt: Runtime) -> None:
    rt.worker(receive_timeout=0.05).drain()


def test_a_run_asks_the_model_once_per_turn_and_runs_its_call_once(
    rt: Runtime, model: ScriptedModel
) -> None:
    run = rt.start_run("refunds", "Refund order o1", idempotency_key="conv-1", by="alice")
    assert run.status is RunStatus.QUEUED and run.turn == 1 and run.owner == "alice"
    drain(rt)
    done = rt.run(run.run_id)
    assert done.status is RunStatus.SUCCEEDED, done.error
    assert done.output == "Refunded 40.00."
    assert [t.number for t in done.turns] == [1, 2]
    call = done.turns[0].calls[0]
    assert call.tool == "execute_refund" and call.task_id is not None
    assert [(call.task_id, 40.0)] == CHARGES
    task = rt.task(call.task_id)
    assert task.status is TaskStatus.SUCCEEDED and task.created_by == "alice"
    assert task.idempotency_key == f"{run.run_id}:1:0"  # never the provider's call id
    assert model.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
    # The conversation the second turn saw: the call, then its result.
    assert [m["role"] for m in done.messages] == ["user", "assistant", "tool", "assistant"]
    assert done.messages[2]["tool_call_id"] == call.call_id
    assert done.usage.total_tokens == sum(t.usage.total_tokens for t in done.turns) > 0


def test_starting_the_same_run_again_asks_nothing_and_charges_nothing(
    rt: Runtime, model: ScriptedModel
) -> None:
    first = rt.start_run("refunds", "Refund order o1", idempotency_key="conv-7")
    drain(rt)
    again = rt.start_run("refunds", "Refund order o1", idempotency_key="conv-7")
    drain(rt)
    assert again.run_id == first.run_id and again.status is RunStatus.SUCCEEDED
    assert len(CHARGES) == 1
    assert sum(model.requests_per_turn().values()) == 2
    with pytest.raises(IdempotencyConflict, match="conv-7"):
        rt.start_run("refunds", "Refund order o2", idempotency_key="conv-7")
    # Keys are per owner: another principal's key of the same text is its own run.
    other = rt.start_run("refunds", "Refund order o1", idempotency_key="conv-7", by="bob")
    assert other.run_id != first.run_id


def test_a_gated_call_parks_the_run_until_the_approval_moves_it_on(
    backend_url: str, clock: FakeClock
) -> None:
    CHARGES.clear()
    script = [Reply.tool_calls(refund_call(500.0)), Reply.text("done")]
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        run = rt.start_run("refunds", "Refund 500 on o1", by="alice")
        drain(rt)
        parked = rt.run(run.run_id)
        assert parked.status is RunStatus.AWAITING_APPROVAL and parked.idle
        (approval,) = rt.approvals("pending")
        drain(rt)  # nothing runs, nothing asks the model while a human decides
        assert sum(model.attempts_per_turn().values()) == 1 and CHARGES == []
        with pytest.raises(AgentQError, match="alice"):
            rt.approve(approval.approval_id, by="alice")  # the run's owner asked for it
        rt.approve(approval.approval_id, by="bob")
        assert rt.run(run.run_id).status is RunStatus.AWAITING_TOOLS
        drain(rt)
        done = rt.run(run.run_id)
        assert done.status is RunStatus.SUCCEEDED and len(CHARGES) == 1
        assert model.requests_per_turn()[(run.run_id, 2)] == 1


def test_a_rejected_call_is_reported_to_the_model_and_never_runs(
    backend_url: str, clock: FakeClock
) -> None:
    CHARGES.clear()
    script = [Reply.tool_calls(refund_call(500.0)), Reply.text("I could not refund.")]
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        run = rt.start_run("refunds", "Refund 500 on o1", by="alice")
        drain(rt)
        (approval,) = rt.approvals("pending")
        rt.reject(approval.approval_id, by="bob", note="too large")
        drain(rt)
        done = rt.run(run.run_id)
        assert done.status is RunStatus.SUCCEEDED and CHARGES == []
        tool_message = done.messages[2]
        assert tool_message["role"] == "tool" and "rejected by bob" in tool_message["content"]
        (second,) = [r for r in model.requests() if r.run_turn == 2]
        assert second.status == 200


def test_a_local_call_commits_inside_the_turn_and_the_next_turn_follows(
    backend_url: str, clock: FakeClock
) -> None:
    MARKED.clear()
    CHARGES.clear()
    script = [
        Reply.tool_calls(("mark_refund_approved", {"order_id": "o1"}), refund_call()),
        Reply.text("Marked and refunded."),
    ]
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        run = rt.start_run("refunds", "Refund o1")
        drain(rt)
        done = rt.run(run.run_id)
        assert done.status is RunStatus.SUCCEEDED, done.error
        local, remote = done.turns[0].calls
        assert local.local and local.task_id is None
        assert local.result == {"order_id": "o1", "state": "refund_approved"}
        assert remote.task_id is not None and MARKED == ["o1"] and len(CHARGES) == 1


def test_the_models_bad_calls_are_told_to_it_not_obeyed(
    backend_url: str, clock: FakeClock
) -> None:
    CHARGES.clear()
    script = [
        Reply.tool_calls(
            ("drop_tables", {}),  # not offered to the agent
            ("execute_refund", {"order_id": "o1"}),  # amount missing
            ("agentq_webhook", {"url": "http://169.254.169.254/"}),  # internal: never offered
            ("execute_refund", {"order_id": "o" * 70_000, "amount": 1.0}),  # over the limit
        ),
        Reply.text("Sorry."),
    ]
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        run = rt.start_run("refunds", "Refund o1")
        drain(rt)
        done = rt.run(run.run_id)
        assert done.status is RunStatus.SUCCEEDED
        errors = [c.error for c in done.turns[0].calls]
        assert all(errors) and all(c.task_id is None for c in done.turns[0].calls)
        assert "drop_tables" in str(errors[0]) and "amount" in str(errors[1])
        assert "exceed the limit" in str(errors[3])
        assert [m["content"][:6] for m in done.messages[2:6]] == ["error:"] * 4
        assert CHARGES == [] and rt.tasks(tool="agentq_webhook") == []


def test_a_throttled_model_is_asked_again_after_its_retry_after(
    rt: Runtime, model: ScriptedModel, clock: FakeClock
) -> None:
    model.fail_next(429, retry_after=30)
    run = rt.start_run("refunds", "Refund o1")
    drain(rt)
    assert rt.run(run.run_id).status is RunStatus.QUEUED
    turn_task = rt.task(str(rt.run(run.run_id).turn_task_id))
    assert turn_task.status is TaskStatus.RETRY_SCHEDULED
    clock.advance(31)
    drain(rt)
    assert rt.run(run.run_id).status is RunStatus.SUCCEEDED
    assert model.attempts_per_turn()[(run.run_id, 1)] == 2


def test_a_model_that_keeps_failing_fails_the_run_with_the_reason(
    backend_url: str, clock: FakeClock
) -> None:
    with ScriptedModel([Reply.error(400, message="bad request")]) as model, make_runtime(
        backend_url, clock, model
    ) as rt:
        run = rt.start_run("refunds", "Refund o1")
        drain(rt)
        failed = rt.run(run.run_id)
        assert failed.status is RunStatus.FAILED and "400" in str(failed.error)


def test_budgets_end_a_run_and_cancel_what_it_left(backend_url: str, clock: FakeClock) -> None:
    CHARGES.clear()
    looping = [Reply.tool_calls(refund_call(1.0, f"o{n}")) for n in range(1, 10)]
    with ScriptedModel(looping) as model, make_runtime(
        backend_url, clock, model, max_turns=2
    ) as rt:
        run = rt.start_run("refunds", "Refund everything")
        drain(rt)
        failed = rt.run(run.run_id)
        assert failed.status is RunStatus.FAILED and "turn budget" in str(failed.error)
        assert len(CHARGES) == 2 and sum(model.attempts_per_turn().values()) == 2
    with ScriptedModel([Reply.tool_calls(refund_call(500.0), usage=(900, 200))]) as model, \
            make_runtime(backend_url, clock, model, max_tokens=1000) as rt:  # fmt: skip
        run = rt.start_run("refunds", "Refund 500")
        drain(rt)
        failed = rt.run(run.run_id)
        assert failed.status is RunStatus.FAILED and "token budget" in str(failed.error)
        assert failed.pending == [] and rt.approvals("pending") == []


def test_cancelling_a_run_cancels_its_calls_approvals_and_timers(
    backend_url: str, clock: FakeClock
) -> None:
    script = [Reply.tool_calls(refund_call(500.0), refund_call(20.0, "o2"))]
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        run = rt.start_run("refunds", "Refund both")
        drain(rt)
        calls = rt.run(run.run_id).turns[0].calls
        cancelled = rt.cancel_run(run.run_id, "changed my mind", by="alice")
        assert cancelled.status is RunStatus.CANCELLED and cancelled.pending == []
        gated = rt.task(str(calls[0].task_id))
        assert gated.status is TaskStatus.CANCELLED
        assert rt.approvals("pending") == []
        with pytest.raises(IllegalTransition, match="cancelled"):
            rt.cancel_run(run.run_id)
        clock.advance(73 * 3600)  # the escalation would have fired
        drain(rt)
        assert rt.run(run.run_id).status is RunStatus.CANCELLED
        assert sum(model.attempts_per_turn().values()) == 1


def test_a_succeeded_run_continues_with_its_owners_next_message(
    rt: Runtime, model: ScriptedModel
) -> None:
    run = rt.start_run("refunds", "Refund o1", by="alice")
    drain(rt)
    with pytest.raises(RunNotFound):
        rt.send_message(run.run_id, "And o2?", by="mallory")
    again = rt.send_message(run.run_id, "And o2?", by="alice")
    assert again.status is RunStatus.QUEUED and again.turn == 3
    drain(rt)
    done = rt.run(run.run_id)
    assert done.status is RunStatus.SUCCEEDED and len(done.turns) == 3
    assert done.messages[-2] == {"role": "user", "content": "And o2?"}


def test_a_retried_message_with_its_key_is_appended_once(
    rt: Runtime, model: ScriptedModel
) -> None:
    run = rt.start_run("refunds", "Refund o1", by="alice")
    drain(rt)
    rt.send_message(run.run_id, "And o2?", by="alice", idempotency_key="m-1")
    drain(rt)
    answered = rt.run(run.run_id)
    # The answer was lost; the caller retries after the run answered again.
    retried = rt.send_message(run.run_id, "And o2?", by="alice", idempotency_key="m-1")
    assert retried.status is RunStatus.SUCCEEDED and retried.turn == answered.turn
    assert [m["content"] for m in retried.messages if m["role"] == "user"] == [
        "Refund o1", "And o2?"]
    with pytest.raises(IdempotencyConflict, match="m-1"):
        rt.send_message(run.run_id, "And o3?", by="alice", idempotency_key="m-1")
    with pytest.raises(InvalidArguments, match="idempotency_key"):
        rt.send_message(run.run_id, "And o3?", by="alice", idempotency_key="")
    drain(rt)
    assert rt.run(run.run_id).turn == answered.turn  # nothing was queued


def test_unknown_agents_and_runs_are_one_clear_error(rt: Runtime) -> None:
    with pytest.raises(AgentQError, match=r"unknown agent 'refundz'.*refunds"):
        rt.start_run("refundz", "x")
    with pytest.raises(RunNotFound):
        rt.run("run_nope")
    with pytest.raises(AgentQError, match="input"):
        rt.start_run("refunds", "   ")


def test_a_gated_local_call_runs_in_the_transaction_that_approves_it(
    backend_url: str, clock: FakeClock
) -> None:
    MARKED.clear()
    script = [Reply.tool_calls(("mark_refund_approved", {"order_id": "o9"})), Reply.text("ok")]
    gate = Policy(approvals=(ApprovalRule(tool="mark_refund_approved"),))
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        rt.policy = gate
        run = rt.start_run("refunds", "Mark o9", by="alice")
        drain(rt)
        assert rt.run(run.run_id).status is RunStatus.AWAITING_APPROVAL and MARKED == []
        (approval,) = rt.approvals("pending")
        task = rt.approve(approval.approval_id, by="bob")
        # Run by the approval itself: no worker was needed for the local call.
        assert task.status is TaskStatus.SUCCEEDED and MARKED == ["o9"]
        assert task.result == {"order_id": "o9", "state": "refund_approved"}
        assert rt.run(run.run_id).status is RunStatus.QUEUED  # its next turn
        drain(rt)
        assert rt.run(run.run_id).status is RunStatus.SUCCEEDED


def test_prune_deletes_finished_runs_once_old_and_keeps_waiting_ones(
    backend_url: str, clock: FakeClock
) -> None:
    script = [Reply.tool_calls(refund_call(500.0)), Reply.text("done")]
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        waiting = rt.start_run("refunds", "Refund 500", by="alice")
        finished = rt.start_run("refunds", "Refund 20", idempotency_key="k1", by="alice")
        drain(rt)
        rt.cancel_run(finished.run_id)
        clock.advance(6 * 86400)
        assert rt.prune().counts.runs == 0  # younger than the 7 days kept
        clock.advance(2 * 86400)
        assert rt.prune(dry_run=True).counts.runs == 1
        assert rt.prune().counts.runs == 1
        with pytest.raises(RunNotFound):
            rt.run(finished.run_id)
        assert rt.run(waiting.run_id).status is RunStatus.AWAITING_APPROVAL
        # Its key went with it: the same key starts a new run.
        again = rt.start_run("refunds", "Refund 20", idempotency_key="k1", by="alice")
        assert again.run_id != finished.run_id


def test_policy_budgets_price_runs_and_cap_an_owners_day(
    backend_url: str, clock: FakeClock
) -> None:
    from agentq.policies import AgentBudget, ModelPrice, OwnerBudget

    CHARGES.clear()
    million = (600_000, 400_000)
    script = [Reply.tool_calls(refund_call(1.0), usage=million), Reply.text("done", usage=million)]
    with ScriptedModel(script) as model, make_runtime(backend_url, clock, model) as rt:
        rt.policy = rt.policy.model_copy(update={
            "prices": {"scripted": ModelPrice(prompt=1.0, completion=2.0)},
            "agents": {"refunds": AgentBudget(max_cost=1.5)},
        })  # fmt: skip
        run = rt.start_run("refunds", "Refund o1")
        drain(rt)
        failed = rt.run(run.run_id)
        # 0.6 M prompt tokens at 1.0 and 0.4 M completion tokens at 2.0: 1.4, then 2.8.
        assert failed.turns[0].usage.cost == pytest.approx(1.4)
        assert failed.status is RunStatus.FAILED and "cost budget" in str(failed.error)
        assert len(CHARGES) == 1 and len(failed.turns) == 2
        # An owner's day: its runs together.
        rt.policy = rt.policy.model_copy(update={
            "agents": {}, "owners": {"bob": OwnerBudget(max_tokens_per_day=1_500_000)},
        })  # fmt: skip
        first = rt.start_run("refunds", "Refund o2", by="bob")
        drain(rt)
        assert "daily token budget" in str(rt.run(first.run_id).error)
        asked = sum(model.attempts_per_turn().values())
        second = rt.start_run("refunds", "Refund o3", by="bob")
        drain(rt)
        refused = rt.run(second.run_id)
        assert refused.status is RunStatus.FAILED and "daily token budget" in str(refused.error)
        assert sum(model.attempts_per_turn().values()) == asked  # asked nothing
        clock.advance(86400)  # the next UTC day
        third = rt.start_run("refunds", "Refund o4", by="bob")
        drain(rt)
        assert rt.run(third.run_id).turns, "a new day's run asks the model again"
        clock.advance(8 * 86400)
        assert rt.prune().counts.run_usage == 2  # both days' records, once past retention


def test_the_recorded_policy_leaves_out_unset_run_budgets_for_older_readers(
    rt: Runtime,
) -> None:
    from agentq import catalog
    from agentq.policies import OwnerBudget

    rt.record_tools()
    stored = rt.backend.get_record(catalog.POLICY_TABLE, catalog._POLICY_KEY)
    assert stored is not None and not {"agents", "prices", "owners"} & set(stored["policy"])
    rt.policy = rt.policy.model_copy(update={"owners": {"bob": OwnerBudget(max_cost_per_day=5)}})
    rt._policy_given = True
    rt.record_tools()
    assert catalog.read_policy(rt.backend).owners["bob"].max_cost_per_day == 5  # type: ignore[union-attr]


def test_a_local_tools_task_runs_in_its_completion_transaction(rt: Runtime) -> None:
    # A call approved by a process without the tool's code, or enqueued by hand:
    # the worker runs its (tx, args) handler inside the commit of its result.
    MARKED.clear()
    task = rt.enqueue_action("mark_refund_approved", {"order_id": "o5"})
    drain(rt)
    done = rt.task(task.task_id)
    assert done.status is TaskStatus.SUCCEEDED, done.error
    assert done.result == {"order_id": "o5", "state": "refund_approved"} and MARKED == ["o5"]


def test_a_prune_pass_reads_no_run_too_young_to_be_old_enough(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100,000 runs awaiting approval made an idle worker's first prune pass read
    # every one of them (59 % CPU): where run ids grow with time, it reads none.
    if not rt.backend.ordered_keys:
        pytest.skip("random run ids (Spanner): every pass reads the table")
    for n in range(5):
        rt.start_run("refunds", f"Refund o{n}")
    read: list[str] = []
    listing = rt.backend.list_records

    def counted(table: str, *args: Any, **kw: Any) -> list[tuple[str, dict[str, Any]]]:
        rows = listing(table, *args, **kw)
        if table == "runs":
            read.extend(key for key, _ in rows)
        return rows

    monkeypatch.setattr(rt.backend, "list_records", counted)
    assert rt.prune().counts.runs == 0
    assert read == []
