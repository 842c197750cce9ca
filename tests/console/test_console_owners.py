"""The console keeps the owners' rule (issue 27): a ``read`` principal sees its
own tasks only, the runtime's own tasks are never cancellable, and an
``approve``-only token works the approvals inbox. Over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import ApprovalStatus, TaskStatus  # noqa: E402
from tests.console.conftest import Served, csrf_of  # noqa: E402
from tests.console.conftest import pending as _pending  # noqa: E402


def test_a_reader_sees_only_its_own_tasks(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    mine = rt.enqueue_action("pay", {"ref": "mine", "amount": 5}, by="agent")
    other = rt.enqueue_action("pay", {"ref": "other", "amount": 6})
    with served.client("agent") as agent:
        listed = agent.get("/tasks").text
        assert mine.task_id in listed and other.task_id not in listed
        assert agent.get(f"/tasks/{mine.task_id}").status_code == 200
        assert agent.get(f"/tasks/{other.task_id}").status_code == 404
        assert 'data-status="queued">1<' in agent.get("/").text
    with served.client("viewer") as viewer:  # operate: everyone's
        listed = viewer.get("/tasks").text
        assert mine.task_id in listed and other.task_id in listed


def test_an_approval_timer_is_shown_to_operators_but_never_cancellable(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval = rt.approval(_pending(rt))
    timer = str(approval.escalation_task_id)
    with served.client("agent") as agent:
        assert agent.get(f"/tasks/{timer}").status_code == 404
    with served.client("root") as root:
        page = root.get(f"/tasks/{timer}")
        assert page.status_code == 200 and 'id="cancel-form"' not in page.text
        csrf = csrf_of(page.text)
        r = root.post(f"/tasks/{timer}/cancel", data={"csrf_token": csrf})
        assert r.status_code == 404
    assert not rt.task(timer).done
    assert rt.audit_log() == []


def test_an_approve_only_token_works_the_inbox(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    with served.client("carol") as carol:
        inbox = carol.get("/approvals")
        assert inbox.status_code == 200 and f'data-approval="{approval_id}"' in inbox.text
        r = carol.post(f"/approvals/{approval_id}/approve",
                       data={"csrf_token": csrf_of(inbox.text)})  # fmt: skip
        assert r.status_code == 303, r.text
        assert carol.get("/tasks").status_code == 403  # approving reads no tasks
    assert rt.approval(approval_id).status == ApprovalStatus.APPROVED
    assert rt.task(rt.approval(approval_id).task_id).status == TaskStatus.QUEUED


def test_a_read_only_console_serves_a_read_only_api(serve: Callable[..., Served]) -> None:
    import httpx

    from tests.console.conftest import TOKENS

    served = serve(api=True, read_only=True)
    rt = served.rt
    approval_id = _pending(rt)
    queued = rt.enqueue_action("pay", {"ref": "q", "amount": 5})
    root = served.url.removesuffix("/console")
    bearer = {"Authorization": f"Bearer {TOKENS['root']}"}
    with httpx.Client(base_url=root, timeout=20, headers=bearer) as api:
        etag = api.get(f"/v1/approvals/{approval_id}").headers["etag"]
        changes = [
            api.post(f"/v1/approvals/{approval_id}:approve", headers={"If-Match": etag}),
            api.post(f"/v1/approvals/{approval_id}:reject", headers={"If-Match": etag}),
            api.post(f"/v1/tasks/{queued.task_id}:cancel"),
            api.post("/v1/tools/pay/actions", json={"args": {"ref": "n", "amount": 1}}),
        ]
        assert api.get(f"/v1/tasks/{queued.task_id}").status_code == 200  # reads still work
    assert [r.status_code for r in changes] == [403] * 4
    assert all("read-only" in r.text for r in changes)
    assert rt.approval(approval_id).status == ApprovalStatus.PENDING
    assert rt.task(queued.task_id).status == TaskStatus.QUEUED
    assert len(rt.tasks(tool="pay")) == 2 and rt.audit_log() == []


def test_dead_letters_and_the_audit_are_for_operators(serve: Callable[..., Served]) -> None:
    from tests.console.conftest import dead as _dead

    served = serve()
    dead_id = _dead(served.rt)
    with served.client("agent") as agent:  # read + enqueue: its own tasks only
        for path in ("/dead-letters", "/audit"):
            r = agent.get(path)
            assert r.status_code == 403 and dead_id not in r.text, path
    with served.client("viewer") as viewer:
        assert dead_id in viewer.get("/dead-letters").text
