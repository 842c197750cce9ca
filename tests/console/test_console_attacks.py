"""The console's sign-in against a hostile client (issue 27, item 9): a real
console on 127.0.0.1, real HTTP. Guessing tokens through the sign-in form costs
the same back-off as on the API; one token signing in over and over cannot sign
anybody else out."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.console._need import need_ui

need_ui()

from agentq import FakeClock  # noqa: E402
from tests.console.conftest import SCOPES, TOKENS, Served, login  # noqa: E402

pytestmark = pytest.mark.attack


def test_wrong_sign_ins_lock_the_address_out(
    serve: Callable[..., Served], clock: FakeClock
) -> None:
    from agentq.server.auth import Principal, Scope, TokenAuth

    auth = TokenAuth.from_tokens(
        {TOKENS[n]: Principal(n, frozenset(Scope(s) for s in SCOPES[n])) for n in TOKENS},
        clock=clock,
    )
    served = serve(auth=auth)
    with served.client() as browser:
        for i in range(6):
            r = login(browser, f"a-wrong-guess-number-{i}")
            assert r.status_code == 401 and "unknown token" in r.text
        locked = login(browser, TOKENS["root"])  # even the right token, while locked out
        assert locked.status_code == 429, locked.text
        assert locked.headers["retry-after"] == "1"
        assert "too many wrong tokens" in locked.text
        assert "agentq_console" not in browser.cookies  # no session was made
        clock.advance(1)
        # A bearer token on the console's pages counts against the same address.
        assert browser.get("/tasks", headers={"Authorization": "Bearer wrong"}).status_code == 303
        assert login(browser, TOKENS["root"]).status_code == 429  # the seventh: 2 s
        clock.advance(2)
        assert login(browser, TOKENS["root"]).status_code == 303


def test_one_token_signing_in_a_thousand_times_signs_nobody_else_out(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    with served.client("alice") as alice, served.client() as flood:
        assert 'id="principal">alice<' in alice.get("/approvals").text
        form = flood.get("/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
        assert nonce is not None
        for _ in range(1000):
            flood.cookies.clear()  # a fresh browser each time, with the form's nonce
            flood.cookies.set("agentq_console_login", nonce[1])
            r = flood.post("/login", data={"nonce": nonce[1], "token": TOKENS["agent"]})
            assert r.status_code == 303
        page = alice.get("/approvals")
        assert page.status_code == 200, "alice was signed out by another principal's sign-ins"
        assert 'id="principal">alice<' in page.text
    sessions = served.console.sessions
    assert sessions.count("agent") == sessions.per_principal
    assert sessions.count("alice") == 1
