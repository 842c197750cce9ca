"""Completion webhooks: sent by a task created in the completion transaction,
never for an outcome that did not commit; signed; host-checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq import FakeClock, Runtime
from agentq.backends import LEASE_SECONDS
from agentq.demo_server import DemoAPI
from agentq.errors import InvalidArguments
from agentq.faults import WorkerCrash
from agentq.ledger import TaskStatus
from agentq.webhooks import WEBHOOK_TOOL, check_callback_url, sign
from tests.http.conftest import ROOT, WEBHOOK_SECRET, WebhookReceiver, settings_for

REFUND = {"order_id": "o1", "amount": 5}


def _webhook_tasks(rt: Runtime) -> list[str]:
    return [t.task_id for t in rt.tasks() if t.tool == WEBHOOK_TOOL]


def test_the_outcome_is_posted_once_signed(runtime: Runtime, receiver: WebhookReceiver) -> None:
    receiver.down = False
    task = runtime.enqueue_action("execute_refund", REFUND, callback_url=receiver.url)
    runtime.worker().drain()
    key = f"{task.task_id}:succeeded"
    assert set(receiver.applied) == {key} and receiver.bad_signatures == 0
    assert receiver.applied[key]["task"]["status"] == "succeeded"
    [hook] = _webhook_tasks(runtime)
    assert runtime.task(hook).status is TaskStatus.SUCCEEDED


def test_no_webhook_for_an_outcome_that_did_not_commit(
    db_url: str, api: DemoAPI, policies_dir: Path, receiver: WebhookReceiver
) -> None:
    """The worker dies after the charge, before its completion commits: nothing of the run is
    recorded, so no webhook task exists; the redelivery's commit creates one."""
    receiver.down = False
    clock = FakeClock()
    rt = Runtime(db_url, tools=ROOT / "tools", policies=policies_dir, clock=clock,
                 settings={**settings_for(api), "webhook_secret": WEBHOOK_SECRET})  # fmt: skip
    try:
        task = rt.enqueue_action("execute_refund", REFUND, callback_url=receiver.url)
        rt.faults.arm("after_external_call", WorkerCrash())  # charged, never committed
        rt.worker().drain()
        assert rt.task(task.task_id).status is TaskStatus.RUNNING  # charged, not recorded
        assert _webhook_tasks(rt) == [] and receiver.attempts == []
        clock.advance(LEASE_SECONDS + 2)  # the lease expires: redelivered
        rt.worker().drain()
        assert rt.task(task.task_id).status is TaskStatus.SUCCEEDED
        assert len(_webhook_tasks(rt)) == 1
        assert list(receiver.applied) == [f"{task.task_id}:succeeded"]
    finally:
        rt.close()


def test_cancelled_and_rejected_tasks_report_too(
    runtime: Runtime, receiver: WebhookReceiver
) -> None:
    receiver.down = False
    small = runtime.enqueue_action("execute_refund", REFUND, callback_url=receiver.url)
    runtime.cancel(small.task_id)
    big = runtime.enqueue_action("execute_refund", {"order_id": "o2", "amount": 500},
                                 callback_url=receiver.url)  # fmt: skip
    assert big.status is TaskStatus.AWAITING_APPROVAL
    runtime.reject(str(big.approval_id), by="alice")
    runtime.worker(queues=["webhooks"]).drain()
    assert set(receiver.applied) == {f"{small.task_id}:cancelled", f"{big.task_id}:cancelled"}


def test_callback_urls_are_checked_against_the_webhook_allow_list(runtime: Runtime) -> None:
    policy = runtime.policy
    assert check_callback_url("http://127.0.0.1:8/x", policy)
    for bad, why in [
        ("https://evil.example/h", "not allowed"), ("ftp://127.0.0.1/h", "http"),
        ("http://u:p@127.0.0.1/h", "credentials"), ("http://127.0.0.1/h?api_key=1", "credentials"),
        ("", "URL"), (7, "URL"),
    ]:  # fmt: skip
        with pytest.raises(InvalidArguments, match=why):
            check_callback_url(bad, policy)
    with pytest.raises(InvalidArguments, match="not allowed"):
        runtime.enqueue_action("execute_refund", REFUND, callback_url="https://evil.example/h")


def test_without_an_allow_list_no_callback_is_accepted(tmp_path: Path) -> None:
    rt = Runtime(f"sqlite:///{tmp_path / 'x.db'}", tools=ROOT / "tools", policies=ROOT / "policies")
    try:
        with pytest.raises(InvalidArguments, match=r"none: set \[tools.agentq_webhook\]"):
            rt.enqueue_action("execute_refund", REFUND, callback_url="http://127.0.0.1/h")
    finally:
        rt.close()


def test_signature_is_standard_webhooks_v1() -> None:
    # Standard Webhooks: base64(HMAC-SHA256(secret, f"{id}.{timestamp}.{body}")), "v1," prefix;
    # a whsec_ secret is base64.
    at = 1700000000
    assert sign("whsec_c2VjcmV0", "m1", at, b"{}") == sign("secret", "m1", at, b"{}")
    assert sign("secret", "m1", at, b"{}").startswith("v1,")
    assert sign("secret", "m1", at, b"{}") != sign("secret", "m2", at, b"{}")


def test_webhook_tool_is_internal(runtime: Runtime) -> None:
    assert runtime.is_internal(WEBHOOK_TOOL)
    assert WEBHOOK_TOOL not in {s["function"]["name"] for s in runtime.tool_schemas()}


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_failed_delivery_retried_then_dead(
    db_url: str, api: DemoAPI, policies_dir: Path, receiver: WebhookReceiver, status: int
) -> None:
    """Issue 27, item 15: a 3xx was recorded as delivered. Redirects are not
    followed (the allow-list checked the URL asked for, not the Location), so
    the receiver never got the outcome: retried like a 5xx, then dead."""
    receiver.down, receiver.answer = False, status
    clock = FakeClock()
    rt = Runtime(db_url, tools=ROOT / "tools", policies=policies_dir, clock=clock,
                 settings={**settings_for(api), "webhook_secret": WEBHOOK_SECRET})  # fmt: skip
    try:
        rt.enqueue_action("execute_refund", REFUND, callback_url=receiver.url)
        rt.worker().drain()
        [hook] = _webhook_tasks(rt)
        first = rt.task(hook)
        assert first.status is TaskStatus.RETRY_SCHEDULED
        assert str(status) in str(first.error)
        for _ in range(40):  # max_attempts=20: each retry is due within a day
            if rt.task(hook).status is TaskStatus.DEAD:
                break
            clock.advance(86_400)
            rt.worker(queues=["webhooks"]).drain()
        assert rt.task(hook).status is TaskStatus.DEAD
        assert len(receiver.attempts) == 20 and receiver.applied == {}
    finally:
        rt.close()
