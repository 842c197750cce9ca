"""Signing in without a form (issue 28 item 16): ``--insecure-local`` opens the
console at once on loopback, and ``agentq ui`` prints a one-time sign-in link
(single use, short-lived, its code written to that one line and nowhere else)."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.console._need import need_ui

need_ui()

from agentq.console.login_links import LoginLinks  # noqa: E402
from agentq.server.auth import InsecureLocal, Principal, Scope  # noqa: E402
from tests.console.conftest import Served, csrf_of  # noqa: E402
from tests.console.conftest import pending as _pending  # noqa: E402
from tests.console.test_console_cli import _ui  # noqa: E402

ALICE = Principal("alice", frozenset({Scope.READ, Scope.APPROVE}))


def test_insecure_local_opens_every_page_without_the_sign_in_form(
    serve: Callable[..., Served],
) -> None:
    served = serve(auth=InsecureLocal())
    approval_id = _pending(served.rt)
    with served.client() as browser:
        page = browser.get("/approvals")
        assert page.status_code == 200 and 'id="principal">local<' in page.text
        cookie = page.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
        # One session: the next page reuses it, no new cookie.
        assert "set-cookie" not in browser.get("/tasks").headers
        # Actions still carry the session's CSRF token.
        r = browser.post(f"/approvals/{approval_id}/approve",
                         data={"csrf_token": csrf_of(page.text)})  # fmt: skip
        assert r.status_code == 303
    assert served.rt.approval(approval_id).decided_by == "local"


def test_insecure_local_signs_in_only_requests_addressed_to_loopback(
    serve: Callable[..., Served],
) -> None:
    served = serve(auth=InsecureLocal())
    port = served.url.split(":")[2].split("/")[0]
    with served.client() as browser:
        for host in ("localhost", "127.0.0.1"):
            ok = browser.get("/", headers={"Host": f"{host}:{port}"})
            assert ok.status_code == 200, host
            browser.cookies.clear()
        # A name that resolves here by rebinding is another site's page: refused
        # outright (421, the loopback guard of --insecure-local), and no session.
        r = browser.get("/", headers={"Host": f"attacker.example:{port}"})
        assert r.status_code == 421 and "set-cookie" not in r.headers


def test_with_tokens_a_page_still_asks_to_sign_in(serve: Callable[..., Served]) -> None:
    served = serve()
    with served.client() as browser:
        r = browser.get("/")
    assert r.status_code == 303 and "/console/login" in r.headers["location"]


def test_a_sign_in_link_works_once(serve: Callable[..., Served]) -> None:
    served = serve()
    code = served.console.links.mint(ALICE)
    with served.client() as browser:
        r = browser.get("/login/link", params={"code": code})
        assert (r.status_code, r.headers["location"]) == (303, "/console/")
        assert "samesite=strict" in r.headers["set-cookie"].lower()
        assert 'id="principal">alice<' in browser.get("/approvals").text
    with served.client() as again:
        r = again.get("/login/link", params={"code": code})
        assert r.status_code == 403 and "used already or has expired" in r.text
        assert again.get("/approvals").status_code == 303  # not signed in
        assert again.get("/login/link", params={"code": "guess"}).status_code == 403
        assert again.get("/login/link").status_code == 403


def test_a_sign_in_link_expires_and_only_a_few_are_kept() -> None:
    now = [1000.0]
    links = LoginLinks(ttl=300, keep=2, now=lambda: now[0])
    late = links.mint(ALICE)
    now[0] += 300
    assert links.redeem(late) is None  # expired at 300 s
    first, second, third = (links.mint(ALICE) for _ in range(3))
    assert links.redeem(first) is None  # forgotten: only two are kept
    assert links.redeem(third) == ALICE and links.redeem(third) is None
    assert links.redeem(second) == ALICE
    assert first not in repr(links.__dict__)  # kept only as a digest


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=30)


def test_agentq_ui_prints_a_one_time_sign_in_link_once(tmp_path: Path) -> None:
    proc = _ui(tmp_path)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        link = re.search(r"^or open (http://127\.0\.0\.1:\d+/console/login/link\?code=(\S+)) "
                         r"\(signs in once, within 5 minutes\)$", lines[2])  # fmt: skip
        assert link, "".join(lines) + (proc.stderr.read() if proc.poll() is not None else "")
        with httpx.Client(timeout=20) as browser:
            r = browser.get(link[1])
            assert r.status_code == 303
            base = link[1].split("/console/")[0]
            assert 'id="principal">carol<' in browser.get(f"{base}/console/").text
            assert httpx.get(link[1], timeout=20).status_code == 403  # spent
    finally:
        out, err = _stop(proc)
    assert proc.returncode == 0, err
    printed = "".join(lines) + out
    assert printed.count(link[2]) == 1 and link[2] not in err  # that one line only


def test_agentq_ui_insecure_local_says_no_sign_in_and_prints_no_link(tmp_path: Path) -> None:
    proc = _ui(tmp_path, "--insecure-local")
    try:
        assert proc.stdout is not None
        first, second = proc.stdout.readline(), proc.stdout.readline()
        url = re.search(r"on (http://127\.0\.0\.1:\d+/console/)", first)
        assert url, first + (proc.stderr.read() if proc.poll() is not None else "")
        assert second.startswith("no sign-in: open it (--insecure-local")
        page = httpx.get(url[1], timeout=20)
        assert page.status_code == 200 and 'id="principal">local<' in page.text
    finally:
        out, err = _stop(proc)
    assert proc.returncode == 0, err
    assert "login/link" not in out
