"""The web console over real HTTP on loopback: every page and every action,
authentication, scopes, CSRF, read-only mode, stale approvals, redaction and
escaping of hostile task arguments (issue 12, web console)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx

from tests.console._need import need_ui

need_ui()

from agentq import ApprovalStatus, Runtime, TaskStatus  # noqa: E402
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from tests.console.conftest import TOKENS, Served, csrf_of, login  # noqa: E402

PAGES = ["/", "/tasks", "/approvals", "/dead-letters", "/audit"]
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'


def _pending(rt: Runtime, ref: str = "r-1", amount: float = 500) -> str:
    task = rt.enqueue_action("pay", {"ref": ref, "amount": amount})
    assert task.status == TaskStatus.AWAITING_APPROVAL
    assert task.approval_id is not None
    return task.approval_id


def _dead(rt: Runtime, ref: str = "d-1") -> str:
    task = rt.enqueue_action("flaky", {"ref": ref, "amount": 5})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    return task.task_id


# -- authentication ---------------------------------------------------------------


def test_every_page_sends_a_visitor_without_a_token_to_the_login_page(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    task_id = served.rt.enqueue_action("pay", {"ref": "r", "amount": 1}).task_id
    with served.client() as anon:
        for path in [*PAGES, f"/tasks/{task_id}"]:
            r = anon.get(path)
            assert r.status_code == 303, path
            assert r.headers["location"].startswith("/console/login?next=")
            assert task_id not in r.text
        wrong = anon.get("/tasks", headers={"Authorization": "Bearer not-a-token-at-all"})
        assert wrong.status_code == 303
        assert anon.get("/events").status_code == 401


def test_every_action_is_refused_without_a_token(serve: Callable[..., Served]) -> None:
    served = serve()
    approval_id = _pending(served.rt)
    dead_id = _dead(served.rt)
    task_id = served.rt.approval(approval_id).task_id
    with served.client() as anon:
        for path in (f"/approvals/{approval_id}/approve", f"/approvals/{approval_id}/reject",
                     f"/tasks/{task_id}/cancel", f"/dead-letters/{dead_id}/replay",
                     f"/dead-letters/{dead_id}/delete"):  # fmt: skip
            assert anon.post(path, data={"note": "x"}).status_code == 401, path
    assert served.rt.approval(approval_id).status == ApprovalStatus.PENDING
    assert served.rt.task(dead_id).status == TaskStatus.DEAD
    assert served.rt.audit_log() == []


def test_login_with_an_unknown_token_is_refused_and_a_known_one_sets_a_strict_cookie(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    with served.client() as client:
        bad = login(client, "wrong-token-0123456789")
        assert bad.status_code == 401
        assert "unknown token" in bad.text
        good = login(client, TOKENS["alice"])
        assert good.status_code == 303
        cookie = good.headers["set-cookie"]
        assert "agentq_console=" in cookie
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
        assert "Path=/console" in cookie
        page = client.get("/")
        assert page.status_code == 200
        assert 'id="principal">alice<' in page.text


def test_the_login_form_needs_its_own_nonce(serve: Callable[..., Served]) -> None:
    with serve().client() as client:
        r = client.post("/login", data={"token": TOKENS["alice"], "nonce": "forged"})
        assert r.status_code == 403
        assert "agentq_console=" not in r.headers.get("set-cookie", "")


def test_login_never_redirects_outside_the_console(serve: Callable[..., Served]) -> None:
    served = serve()

    def landing(target: str) -> str:
        with served.client() as client:
            form = client.get("/login", params={"next": target})
            nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
            assert nonce is not None
            r = client.post("/login", data={"nonce": nonce[1], "token": TOKENS["alice"],
                                            "next": target})  # fmt: skip
            assert r.status_code == 303
            return r.headers["location"]

    for target in ("//evil.example/x", "https://evil.example/", "/console//evil.example"):
        assert landing(target) == "/console/", target
    assert landing("/console/approvals") == "/console/approvals"


def test_a_bearer_token_reads_pages_without_a_session(serve: Callable[..., Served]) -> None:
    with serve().client() as client:
        r = client.get("/tasks", headers={"Authorization": f"Bearer {TOKENS['viewer']}"})
        assert r.status_code == 200
        assert 'id="principal">viewer<' in r.text


def test_sign_out_ends_the_session(serve: Callable[..., Served]) -> None:
    with serve().client("alice") as client:
        page = client.get("/")
        cookie = client.cookies["agentq_console"]
        assert client.post("/logout", data={"csrf_token": csrf_of(page.text)}).status_code == 303
        client.cookies.set("agentq_console", cookie, path="/console")
        assert client.get("/").status_code == 303


# -- pages ------------------------------------------------------------------------


def test_every_page_shows_its_key_elements_and_strict_headers(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    dead_id = _dead(rt)
    done = rt.enqueue_action("pay", {"ref": "small", "amount": 3})
    rt.worker().drain()
    with served.client("viewer") as client:
        pages = {path: client.get(path) for path in PAGES}
        for path, r in pages.items():
            assert r.status_code == 200, path
            assert "script-src 'self'" in r.headers["content-security-policy"]
            assert r.headers["x-frame-options"] == "DENY"
            assert r.headers["cache-control"] == "no-store"
        overview = pages["/"].text
        assert 'id="queue-figures"' in overview and 'data-queue="work"' in overview
        assert 'sse-connect="/console/events"' in overview
        succeeded = len(rt.tasks(TaskStatus.SUCCEEDED))  # the small payment, notifications
        assert f'data-status="succeeded">{succeeded}<' in overview
        assert 'data-status="dead">1<' in overview
        assert done.task_id in pages["/tasks"].text and dead_id in pages["/tasks"].text
        assert f'data-approval="{approval_id}"' in pages["/approvals"].text
        assert f'data-entry="{dead_id}"' in pages["/dead-letters"].text
        assert "no recorded action" in pages["/audit"].text
        detail = client.get(f"/tasks/{done.task_id}").text
        assert 'id="task-status">succeeded<' in detail
        assert 'id="task-result"' in detail and "&#34;paid&#34;: 3.0" in detail
        assert client.get("/tasks/tsk_nonexistent").status_code == 404


def test_the_task_list_filters_by_status_and_tool_and_searches(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    small = rt.enqueue_action("pay", {"ref": "needle-42", "amount": 3})
    other = rt.enqueue_action("pay", {"ref": "hay", "amount": 4})
    dead_id = _dead(rt, ref="d-9")
    with served.client("viewer") as client:

        def listed(**params: str) -> set[str]:
            r = client.get("/tasks", params=params)
            assert r.status_code == 200
            return set(re.findall(r'<tr data-task="([^"]+)"', r.text))

        assert listed() == {small.task_id, other.task_id, dead_id}
        assert listed(status="dead") == {dead_id}
        assert listed(tool="pay") == {small.task_id, other.task_id}
        assert listed(q="NEEDLE") == {small.task_id}
        assert listed(q=dead_id[-10:]) == {dead_id}
        assert listed(status="succeeded", q="needle") == {small.task_id}
        assert listed(q="nothing-matches-this") == set()
        assert client.get("/tasks", params={"status": "bogus"}).status_code == 400


def test_the_task_page_shows_attempts_error_trace_id_and_audit(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    dead_id = _dead(served.rt)
    with served.client("viewer") as client:
        page = client.get(f"/tasks/{dead_id}").text
    assert 'id="task-status">dead<' in page
    assert 'id="task-attempt">1<' in page and 'id="task-deliveries">1<' in page
    assert 'id="task-error"' in page and "PermanentError" in page
    assert 'id="task-traceback"' in page and "Traceback (most recent call last)" in page
    assert "raise PermanentError" in page and "hunter2" not in page
    assert 'id="trace-id"' in page
    assert 'id="audit-list"' in page


def test_a_script_in_task_args_is_rendered_inert_on_every_page(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt, ref=HOSTILE)
    task_id = rt.approval(approval_id).task_id
    dead_id = _dead(rt, ref=HOSTILE)
    with served.client("viewer") as client:
        for path in ["/tasks", f"/tasks/{task_id}", f"/tasks/{dead_id}", "/approvals",
                     "/dead-letters", "/tasks?q=" + "%3Cscript%3E"]:  # fmt: skip
            html = client.get(path).text
            assert "<script>window.__pwned" not in html, path
            assert "<img src=x" not in html, path
            assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html, path


def test_secrets_in_args_and_errors_are_never_shown(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt, ref="https://bob:hunter2@shop.example/cb?token=s3cr3t")
    dead_id = _dead(rt)
    with served.client("viewer") as client:
        task_id = rt.approval(approval_id).task_id
        for path in [*PAGES, f"/tasks/{task_id}", f"/tasks/{dead_id}"]:
            html = client.get(path).text
            for secret in ("hunter2", "s3cr3t", "k3y"):
                assert secret not in html, (path, secret)
        assert "REDACTED" in client.get(f"/tasks/{dead_id}").text


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


# -- refusals: CSRF, scopes, read-only ----------------------------------------------


def test_a_cookie_session_needs_the_csrf_token(serve: Callable[..., Served]) -> None:
    served = serve()
    approval_id = _pending(served.rt)
    with served.client("alice") as client:
        for data in ({}, {"csrf_token": "forged"}, {"csrf_token": ""}):
            r = client.post(f"/approvals/{approval_id}/approve", data=data)
            assert r.status_code == 403, data
            assert "CSRF" in r.text
    assert served.rt.approval(approval_id).status == ApprovalStatus.PENDING
    assert served.rt.audit_log() == []


def test_each_action_needs_its_scope(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    dead_id = _dead(rt)
    with served.client("viewer") as viewer:
        csrf = csrf_of(viewer.get("/").text)
        r = viewer.post(f"/approvals/{approval_id}/approve", data={"csrf_token": csrf})
        assert r.status_code == 403 and "viewer lacks the &#39;approve&#39; scope" in r.text
        assert '<form method="post" class="decide"' not in viewer.get("/approvals").text
    with served.client("alice") as alice:
        csrf = csrf_of(alice.get("/").text)
        task_id = rt.approval(approval_id).task_id
        assert alice.post(f"/tasks/{task_id}/cancel", data={"csrf_token": csrf}).status_code == 403
        r = alice.post(f"/dead-letters/{dead_id}/replay", data={"csrf_token": csrf})
        assert r.status_code == 403
    assert rt.approval(approval_id).status == ApprovalStatus.PENDING
    assert rt.task(dead_id).status == TaskStatus.DEAD
    assert rt.audit_log() == []


def test_read_only_mode_refuses_every_action_and_shows_no_buttons(
    serve: Callable[..., Served],
) -> None:
    served = serve(read_only=True)
    rt = served.rt
    approval_id = _pending(rt)
    dead_id = _dead(rt)
    task_id = rt.approval(approval_id).task_id
    with served.client("root") as client:
        inbox = client.get("/approvals").text
        assert 'id="read-only"' in inbox
        assert "Approve</button>" not in inbox
        assert "Replay</button>" not in client.get("/dead-letters").text
        assert 'id="cancel-form"' not in client.get(f"/tasks/{task_id}").text
        csrf = csrf_of(client.get("/").text)
        for path in (f"/approvals/{approval_id}/approve", f"/approvals/{approval_id}/reject",
                     f"/tasks/{task_id}/cancel", f"/dead-letters/{dead_id}/replay",
                     f"/dead-letters/{dead_id}/delete"):  # fmt: skip
            r = client.post(path, data={"csrf_token": csrf})
            assert r.status_code == 403, path
            assert "read-only" in r.text
    assert rt.approval(approval_id).status == ApprovalStatus.PENDING
    assert rt.task(dead_id).status == TaskStatus.DEAD
    assert [e["entry_id"] for e in rt.dead_letters()] == [dead_id]
    assert rt.audit_log() == []


def test_an_oversized_note_is_refused(serve: Callable[..., Served]) -> None:
    served = serve()
    approval_id = _pending(served.rt)
    with served.client("alice") as client:
        csrf = csrf_of(client.get("/").text)
        r = client.post(f"/approvals/{approval_id}/approve",
                        data={"csrf_token": csrf, "note": "x" * 3000})  # fmt: skip
        assert r.status_code == 400
        r = client.post(f"/approvals/{approval_id}/approve",
                        data={"csrf_token": csrf, "note": "x" * 70_000})  # fmt: skip
        assert r.status_code == 413
    assert served.rt.approval(approval_id).status == ApprovalStatus.PENDING


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


# -- live figures -------------------------------------------------------------------


def _next_event(lines: object, name: str) -> str:
    event, data = None, []
    for line in lines:  # type: ignore[attr-defined]
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])
        elif line == "" and event is not None:
            if event == name:
                return "\n".join(data)
            event, data = None, []
    raise AssertionError(f"the stream ended before a {name!r} event")


def test_the_event_stream_sends_the_live_queue_figures(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    with served.client("viewer") as client, client.stream("GET", "/events") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        first = _next_event(lines, "queues")
        assert '<tr data-queue="work"><td>work</td><td class="depth">0<' in first
        rt.enqueue_action("pay", {"ref": "live", "amount": 1})
        for _ in range(200):  # each event is a fresh reading: the new task shows up
            fragment = _next_event(lines, "queues")
            if '<td class="depth">1<' in fragment:
                break
        else:
            raise AssertionError("the enqueued task never showed in the live figures")
        assert '<td class="ready">1<' in fragment


def test_the_event_stream_ends_after_its_time(serve: Callable[..., Served]) -> None:
    served = serve(stream_seconds=0.5)
    with served.client("viewer") as client, client.stream("GET", "/events") as stream:
        body = "".join(stream.iter_text())  # returns: the server closes the stream
    assert body.count("event: queues") >= 1


def test_one_stream_too_many_is_told_to_retry_later(serve: Callable[..., Served]) -> None:
    served = serve(max_streams=1)
    with served.client("viewer") as client, client.stream("GET", "/events") as first:
        lines = first.iter_lines()  # kept: dropping the iterator closes the stream
        _next_event(lines, "queues")
        assert served.console.open_streams == 1
        with client.stream("GET", "/events") as second:
            body = "".join(second.iter_text())  # ends at once
        assert "retry: 10000" in body and "event: queues" not in body
    # Closing the first stream frees its place once the server notices the
    # disconnect, which takes a moment: retry as a browser would, within 30 s.
    deadline = time.monotonic() + 30
    while True:
        with served.client("viewer") as client, client.stream("GET", "/events") as again:
            head = next(again.iter_text())
            if not head.startswith("retry: 10000"):
                break
        assert time.monotonic() < deadline, "the first stream's place was never freed"
        time.sleep(0.05)


def test_pages_need_the_read_scope(serve: Callable[..., Served]) -> None:
    from agentq.server.auth import Principal, Scope, TokenAuth

    only = TokenAuth.from_tokens(
        {"enqueue-token-0123456789": Principal("bot", frozenset({Scope.ENQUEUE}))}
    )
    served = serve(auth=only)
    with httpx.Client(base_url=served.url, timeout=20) as client:
        r = client.get("/tasks", headers={"Authorization": "Bearer enqueue-token-0123456789"})
        assert r.status_code == 403
        assert "may not read" in r.text


def test_mounted_in_the_http_api_it_shares_the_api_s_auth(serve: Callable[..., Served]) -> None:
    served = serve(api=True)
    rt = served.rt
    approval_id = _pending(rt)
    root = served.url.removesuffix("/console")
    bearer = {"Authorization": f"Bearer {TOKENS['alice']}"}
    with httpx.Client(base_url=root, timeout=20) as api:
        assert api.get(f"/v1/approvals/{approval_id}").status_code == 401
        assert api.get(f"/v1/approvals/{approval_id}", headers=bearer).status_code == 200
        page = api.get("/console/approvals", headers=bearer)
        assert page.status_code == 200 and f'data-approval="{approval_id}"' in page.text
        # A bearer request needs no CSRF token: a browser never sends one by itself.
        r = api.post(f"/console/approvals/{approval_id}/approve", headers=bearer,
                     data={"note": "via the API's auth"})  # fmt: skip
        assert r.status_code == 303
    with served.client("viewer") as browser:  # and the same tokens sign a browser in
        assert 'id="principal">viewer<' in browser.get("/approvals").text
    assert rt.approval(approval_id).decided_by == "alice"
    assert [e.actor for e in rt.audit_log()] == ["alice"]


def test_insecure_local_still_needs_a_session_and_csrf_from_a_browser(
    serve: Callable[..., Served],
) -> None:
    from agentq.server.auth import InsecureLocal

    served = serve(auth=InsecureLocal())
    approval_id = _pending(served.rt)
    with served.client() as anon:
        # Admitting every loopback request is ambient authority, like a cookie: a
        # page on any site could post here. So no session, no action.
        assert anon.get("/approvals").status_code == 303
        assert anon.post(f"/approvals/{approval_id}/approve").status_code == 401
        assert login(anon, "anything-at-all").status_code == 303
        assert anon.post(f"/approvals/{approval_id}/approve").status_code == 403
        csrf = csrf_of(anon.get("/approvals").text)
        r = anon.post(f"/approvals/{approval_id}/approve", data={"csrf_token": csrf})
        assert r.status_code == 303
    assert served.rt.approval(approval_id).decided_by == "local"
