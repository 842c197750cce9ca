"""Browser sessions: they end, they are bounded, CSRF tokens are checked exactly."""

from __future__ import annotations

from tests.console._need import need_ui

need_ui()

from agentq.console.sessions import SessionStore  # noqa: E402
from agentq.server.auth import Principal  # noqa: E402


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_after_its_ttl_and_on_sign_out() -> None:
    ticks = Ticks()
    store = SessionStore(ttl=60, now=ticks)
    session = store.start(Principal("alice"))
    assert store.get(session.session_id) == session
    ticks.now = 59.9
    assert store.get(session.session_id) is not None
    ticks.now = 60.0
    assert store.get(session.session_id) is None
    other = store.start(Principal("bob"))
    store.end(other.session_id)
    assert store.get(other.session_id) is None
    assert store.get(None) is None and store.get("") is None


def test_at_most_max_sessions_are_kept_the_oldest_dropped() -> None:
    store = SessionStore(max_sessions=3)
    sessions = [store.start(Principal(f"u{i}")) for i in range(5)]
    alive = [s for s in sessions if store.get(s.session_id) is not None]
    assert [s.principal.name for s in alive] == ["u2", "u3", "u4"]


def test_csrf_tokens_are_compared_exactly_and_flashes_are_bounded() -> None:
    store = SessionStore()
    session = store.start(Principal("alice"))
    assert session.csrf_ok(session.csrf_token)
    for wrong in (None, "", session.csrf_token[:-1], session.csrf_token + "x"):
        assert not session.csrf_ok(wrong)
    assert session.session_id != session.csrf_token
    for i in range(9):
        store.flash(session.session_id, f"m{i}")
    assert store.take_flashes(session.session_id) == ["m4", "m5", "m6", "m7", "m8"]
    assert store.take_flashes(session.session_id) == []
    store.flash("unknown-session", "dropped")
    assert store.take_flashes("unknown-session") == []
