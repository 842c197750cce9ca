"""The console's actions over real HTTP on loopback: the approvals inbox
(approver = the signed-in user, stale approvals refused) and the admin's
cancel, replay and delete, each audited (issue 12, web console)."""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import ApprovalStatus, TaskStatus  # noqa: E402
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from tests.console.conftest import Served, csrf_of  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402
from tests.console.conftest import pending as _pending  # noqa: E402

# -- the approvals inbox ------------------------------------------------------------


def test_the_inbox_lists_waiting_approvals_first_oldest_first(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    first = _pending(rt, ref="first")
    served.rt.clock.advance(5)  # type: ignore[attr-defined]
    second = _pending(rt, ref="second")
    decided = _pending(rt, ref="decided")
    rt.reject(decided, by="bob", note="no")
    with served.client("viewer") as client:
        html = client.get("/approvals").text
    order = re.findall(r'data-approval="([^"]+)"', html)
    assert order == [first, second, decided]
    assert 'class="by">bob<' in html


def test_approving_records_the_signed_in_user_not_a_form_field(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    with served.client("alice") as client:
        csrf = csrf_of(client.get("/approvals").text)
        r = client.post(f"/approvals/{approval_id}/approve",
                        data={"csrf_token": csrf, "note": "ok by me", "by": "mallory"})  # fmt: skip
        assert r.status_code == 303
        assert r.headers["location"] == "/console/approvals"
        after = client.get("/approvals").text
        assert f"approved {approval_id}" in after
    approval = rt.approval(approval_id)
    assert approval.status == ApprovalStatus.APPROVED
    assert approval.decided_by == "alice"
    assert approval.decision_note == "ok by me"
    assert rt.task(approval.task_id).status == TaskStatus.QUEUED
    [entry] = rt.audit_log()
    assert (entry.actor, entry.action, entry.target, entry.task_id, entry.note) == (
        "alice", AuditAction.APPROVE, approval_id, approval.task_id, "ok by me",
    )  # fmt: skip


def test_rejecting_with_a_note(serve: Callable[..., Served]) -> None:
    served = serve()
    approval_id = _pending(served.rt)
    with served.client("alice") as client:
        csrf = csrf_of(client.get("/approvals").text)
        r = client.post(f"/approvals/{approval_id}/reject",
                        data={"csrf_token": csrf, "note": "too much"})  # fmt: skip
        assert r.status_code == 303
    approval = served.rt.approval(approval_id)
    assert (approval.status, approval.decided_by) == (ApprovalStatus.REJECTED, "alice")
    assert served.rt.task(approval.task_id).status == TaskStatus.CANCELLED
    assert [e.action for e in served.rt.audit_log()] == [AuditAction.REJECT]


def test_a_stale_approval_is_refused_and_the_first_decision_stands(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    with served.client("alice") as client:
        csrf = csrf_of(client.get("/approvals").text)  # alice's page shows it pending
        rt.approve(approval_id, by="bob")  # meanwhile bob approves (the CLI, say)
        r = client.post(f"/approvals/{approval_id}/reject", data={"csrf_token": csrf})
        assert r.status_code == 409
        assert "bob" in r.text
        again = client.post(f"/approvals/{approval_id}/approve", data={"csrf_token": csrf})
        assert again.status_code == 409
    approval = rt.approval(approval_id)
    assert (approval.status, approval.decided_by) == (ApprovalStatus.APPROVED, "bob")
    assert [e.actor for e in rt.audit_log()] == ["bob"]


def test_an_approval_escalated_since_the_page_showed_it_is_stale(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    with served.client("alice") as client:
        page = client.get("/approvals").text
        version = re.search(r'name="version" value="([^"]+)"', page)
        assert version is not None and version[1] == rt.approval(approval_id).version
        rt.clock.advance(4 * 86400)  # type: ignore[attr-defined]  # past escalate_after
        rt.worker().drain()
        assert rt.approval(approval_id).status == ApprovalStatus.ESCALATED
        r = client.post(f"/approvals/{approval_id}/approve",
                        data={"csrf_token": csrf_of(page), "version": version[1]})  # fmt: skip
        assert r.status_code == 409
        assert "changed since" in r.text and "escalated" in r.text
        fresh = client.get("/approvals").text  # read again: now it can be decided
        version = re.search(r'name="version" value="([^"]+)"', fresh)
        assert version is not None
        r = client.post(f"/approvals/{approval_id}/approve",
                        data={"csrf_token": csrf_of(fresh), "version": version[1]})  # fmt: skip
        assert r.status_code == 303
    assert rt.approval(approval_id).decided_by == "alice"


def test_an_unknown_approval_is_404(serve: Callable[..., Served]) -> None:
    with serve().client("alice") as client:
        csrf = csrf_of(client.get("/").text)
        r = client.post("/approvals/apr_nonexistent/approve", data={"csrf_token": csrf})
        assert r.status_code == 404


def test_an_approval_voided_by_a_cancel_is_stale_too(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    with served.client("alice") as client:
        csrf = csrf_of(client.get("/approvals").text)
        rt.cancel(rt.approval(approval_id).task_id, by="ops")
        r = client.post(f"/approvals/{approval_id}/approve", data={"csrf_token": csrf})
        assert r.status_code == 409
    assert rt.approval(approval_id).status == ApprovalStatus.VOID


# -- admin actions ------------------------------------------------------------------


def test_an_admin_cancels_a_task(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    task = rt.enqueue_action("pay", {"ref": "c", "amount": 2})
    with served.client("root") as client:
        page = client.get(f"/tasks/{task.task_id}").text
        assert 'id="cancel-form"' in page
        r = client.post(f"/tasks/{task.task_id}/cancel",
                        data={"csrf_token": csrf_of(page), "note": "duplicate order"})  # fmt: skip
        assert r.status_code == 303
        again = client.post(f"/tasks/{task.task_id}/cancel", data={"csrf_token": csrf_of(page)})
        assert again.status_code == 409
    assert rt.task(task.task_id).status == TaskStatus.CANCELLED
    [entry] = rt.audit_log()
    assert (entry.actor, entry.action, entry.note) == ("root", AuditAction.CANCEL,
                                                       "duplicate order")  # fmt: skip


def test_an_admin_replays_and_deletes_dead_letters(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    replayed, deleted = _dead(rt, "d-1"), _dead(rt, "d-2")
    with served.client("root") as client:
        csrf = csrf_of(client.get("/dead-letters").text)
        assert client.post(f"/dead-letters/{replayed}/replay",
                           data={"csrf_token": csrf}).status_code == 303  # fmt: skip
        assert client.post(f"/dead-letters/{deleted}/delete",
                           data={"csrf_token": csrf}).status_code == 303  # fmt: skip
        assert client.post(f"/dead-letters/{deleted}/delete",
                           data={"csrf_token": csrf}).status_code == 404  # fmt: skip
        assert client.post(f"/dead-letters/{replayed}/replay",
                           data={"csrf_token": csrf}).status_code == 409  # fmt: skip
        page = client.get("/dead-letters").text
        assert "dlq-empty" in page
        audit_page = client.get("/audit").text
        assert audit_page.count('class="actor">root<') == 2
    assert rt.task(replayed).status == TaskStatus.QUEUED
    assert rt.task(replayed).attempt == 2
    assert rt.task(deleted).status == TaskStatus.DEAD
    assert rt.dead_letters() == []
    assert [(e.action, e.target) for e in rt.audit_log()] == [
        (AuditAction.DELETE_DEAD_LETTER, deleted), (AuditAction.REPLAY, replayed),
    ]  # fmt: skip


def test_an_approver_edits_the_call_before_approving(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    with served.client("alice") as client:
        page = client.get("/approvals").text
        assert 'name="changes"' in page
        csrf = csrf_of(page)
        bad = client.post(f"/approvals/{approval_id}/approve",
                          data={"csrf_token": csrf, "changes": "[1]"})  # fmt: skip
        assert bad.status_code == 400 and "JSON object" in bad.text
        off = client.post(f"/approvals/{approval_id}/approve",
                          data={"csrf_token": csrf, "changes": '{"amount": "lots"}'})  # fmt: skip
        assert off.status_code == 400 and "amount" in off.text
        ok = client.post(f"/approvals/{approval_id}/approve",
                         data={"csrf_token": csrf, "changes": '{"amount": 40}'})  # fmt: skip
        assert ok.status_code == 303
    approval = rt.approval(approval_id)
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by == "alice"
    assert approval.approved_args == {**approval.args, "amount": 40}
    assert rt.task(approval.task_id).args["amount"] == 40
    [entry] = rt.audit_log()
    assert entry.edited_args is not None and entry.edited_args["amount"] == 40


def test_an_escalated_approval_says_escalated_not_escalates_ago(
    serve: Callable[..., Served],
) -> None:
    """Issue 39, 2.12: an approval that had escalated read "escalates 2 min ago"."""
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)

    def shown(client: object) -> str:  # the inbox's words, without the markup
        return re.sub(r"<[^>]+>", "", client.get("/approvals").text)  # type: ignore[attr-defined]

    with served.client("alice") as client:
        assert "escalates in 3 d" in shown(client)  # still ahead
        rt.clock.advance(3 * 86400 + 60)  # type: ignore[attr-defined]  # past escalate_after
        due = shown(client)  # no worker yet: due, not done
        assert "escalation due 1 min ago" in due and "escalate 1 min ago" not in due, due
        rt.worker().drain()
        assert rt.approval(approval_id).status == ApprovalStatus.ESCALATED
        rt.clock.advance(120)  # type: ignore[attr-defined]
        page = shown(client)
    assert "escalated 2 min ago" in page, page
    assert not re.search(r"escalates? \d+ \w+ ago", page), page
