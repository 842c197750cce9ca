"""Guessing tokens costs time (issue 27, item 9), as an attacker would try it:
a real server on 127.0.0.1, real HTTP, one client address hammering wrong
tokens. The back-off runs on a FakeClock given to the authenticator, so the
test says exactly when the address may try again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentq import FakeClock, Runtime
from agentq.errors import ConfigError
from tests.http.conftest import LiveServer, write_tokens

pytestmark = pytest.mark.attack


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def guarded(runtime: Runtime, tmp_path: Path, clock: FakeClock) -> Iterator[LiveServer]:
    from agentq.server import TokenAuth, create_app

    auth = TokenAuth.from_file(write_tokens(tmp_path / "tokens.toml"), clock=clock)
    live = LiveServer(create_app(runtime, auth=auth)).start()
    yield live
    live.stop()


def _from(address: str, live: LiveServer, token: str) -> httpx.Client:
    """A client whose connections leave from ``address`` (any 127.x is loopback)."""
    return httpx.Client(
        base_url=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=30,
        transport=httpx.HTTPTransport(local_address=address),
    )  # fmt: skip


def test_wrong_tokens_lock_the_address_out_with_a_doubling_back_off(
    guarded: LiveServer, clock: FakeClock
) -> None:
    with _from("127.0.0.1", guarded, "guess-0000") as guesser, \
            _from("127.0.0.1", guarded, "reader-token") as same_address, \
            _from("127.0.0.2", guarded, "reader-token") as elsewhere:  # fmt: skip
        for _ in range(5):  # a few mistakes are free
            assert guesser.get("/v1/tasks").status_code == 401
        assert same_address.get("/v1/tasks").status_code == 200
        assert guesser.get("/v1/tasks").status_code == 401  # the sixth: locked out 1 s
        refused = guesser.get("/v1/tasks")
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "1"
        # Locked out, a right token is refused like a wrong one: it is not checked.
        assert same_address.get("/v1/tasks").status_code == 429
        assert elsewhere.get("/v1/tasks").status_code == 200  # another address is not
        clock.advance(1)
        assert guesser.get("/v1/tasks").status_code == 401  # the seventh: 2 s
        assert guesser.get("/v1/tasks").headers["retry-after"] == "2"
        clock.advance(2)
        assert same_address.get("/v1/tasks").status_code == 200
        for _ in range(20):  # the back-off doubles up to its cap
            clock.advance(60)
            assert guesser.get("/v1/tasks").status_code == 401
        assert guesser.get("/v1/tasks").headers["retry-after"] == "60"
        clock.advance(59)
        assert same_address.get("/v1/tasks").status_code == 429
        clock.advance(1)
        assert same_address.get("/v1/tasks").status_code == 200


def test_a_tokens_file_refuses_a_short_token_naming_the_entry_not_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentq.server import TokenAuth

    monkeypatch.setenv("AGENTQ_TOKEN_BOT", "s3cr3t-pw")
    path = tmp_path / "tokens.toml"
    path.write_text('[[tokens]]\nname = "bot"\nscopes = ["read"]\nenv = "AGENTQ_TOKEN_BOT"\n')
    with pytest.raises(ConfigError) as raised:
        TokenAuth.from_file(path)
    message = str(raised.value)
    assert "'bot'" in message and "AGENTQ_TOKEN_BOT" in message and "16" in message
    assert "s3cr3t-pw" not in message
    monkeypatch.setenv("AGENTQ_TOKEN_BOT", "  s3cr3t-pw-but-long-enough  ")
    auth = TokenAuth.from_file(path)  # 16 characters or more, spaces around ignored
    assert auth.loopback_only is False
