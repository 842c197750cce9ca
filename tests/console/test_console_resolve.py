"""The console's task page shows a parked (outcome_unknown) task and lets an admin
resolve it; a waiting task shows what it runs after (issue 13, items 7 and 16)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console._need import need_ui

need_ui()

from agentq import FakeClock, OutcomeUnknown, Runtime, TaskStatus, ToolContext, tool  # noqa: E402
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from tests.console.conftest import POLICY, PayArgs, Served, csrf_of, flaky, notify, page, pay  # noqa: E402


@tool(queue="work", idempotent=False)
def unsure(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    raise OutcomeUnknown("the provider's answer was lost")


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(
        f"sqlite:///{tmp_path / 'console.db'}",
        tools=[pay, flaky, notify, page, unsure], policies=POLICY, clock=clock,
    )  # fmt: skip
    yield runtime
    runtime.close()


def _parked(rt: Runtime) -> str:
    task = rt.enqueue_action("unsure", {"ref": "u", "amount": 3})
    rt.worker().drain()
    assert rt.task(task.task_id).status is TaskStatus.OUTCOME_UNKNOWN
    return task.task_id


def test_an_admin_resolves_an_unknown_outcome_with_the_result_found(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    task_id = _parked(served.rt)
    with served.client("root") as client:
        html = client.get(f"/tasks/{task_id}").text
        assert 'id="resolve-form"' in html and "outcome_unknown" in html
        bad = client.post(f"/tasks/{task_id}/resolve", data={
            "csrf_token": csrf_of(html), "resolution": "succeeded", "result": "{nope"})  # fmt: skip
        assert bad.status_code == 400
        r = client.post(f"/tasks/{task_id}/resolve", data={
            "csrf_token": csrf_of(html), "resolution": "succeeded",
            "result": '{"paid": 3}', "note": "seen in the provider dashboard"})  # fmt: skip
        assert r.status_code == 303
        again = client.post(f"/tasks/{task_id}/resolve",
                            data={"csrf_token": csrf_of(html), "resolution": "retry"})  # fmt: skip
        assert again.status_code == 409
    done = served.rt.task(task_id)
    assert done.status is TaskStatus.SUCCEEDED and done.result == {"paid": 3}
    [entry] = served.rt.audit_log()
    assert (entry.actor, entry.action) == ("root", AuditAction.RESOLVE)


def test_only_an_admin_may_resolve(serve: Callable[..., Served]) -> None:
    served = serve()
    task_id = _parked(served.rt)
    with served.client("alice") as client:
        html = client.get(f"/tasks/{task_id}").text
        assert 'id="resolve-form"' not in html
        r = client.post(f"/tasks/{task_id}/resolve",
                        data={"csrf_token": csrf_of(html), "resolution": "retry"})  # fmt: skip
        assert r.status_code == 403
    assert served.rt.task(task_id).status is TaskStatus.OUTCOME_UNKNOWN


def test_a_waiting_task_shows_what_it_runs_after(serve: Callable[..., Served]) -> None:
    served = serve()
    first = served.rt.enqueue_action("pay", {"ref": "a", "amount": 1})
    waiting = served.rt.enqueue_action("pay", {"ref": "b", "amount": 1}, after=[first])
    with served.client("viewer") as client:
        html = client.get(f"/tasks/{waiting.task_id}").text
    assert "waiting" in html and f"{first.task_id}</a> (waiting)" in html
