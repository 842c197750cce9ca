"""The console over real HTTP on loopback: who may see and do what. Sign-in,
sessions, bearer tokens, the HTTP API's auth shared, CSRF tokens, scopes and
the read-only mode (issue 12, web console)."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx

from tests.console._need import need_ui

need_ui()

from agentq import ApprovalStatus, TaskStatus  # noqa: E402
from tests.console.conftest import TOKENS, Served, csrf_of, login  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402
from tests.console.conftest import pending as _pending  # noqa: E402

PAGES = ["/", "/tasks", "/approvals", "/dead-letters", "/audit"]


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
        assert anon.post(f"/approvals/{approval_id}/approve").status_code == 401
        # No sign-in form (issue 28 item 16): a page starts the session itself...
        page = anon.get("/approvals")
        assert page.status_code == 200 and 'id="principal">local<' in page.text
        # ...and an action still needs its CSRF token.
        assert anon.post(f"/approvals/{approval_id}/approve").status_code == 403
        csrf = csrf_of(anon.get("/approvals").text)
        r = anon.post(f"/approvals/{approval_id}/approve", data={"csrf_token": csrf})
        assert r.status_code == 303
    assert served.rt.approval(approval_id).decided_by == "local"
