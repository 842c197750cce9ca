"""``agentq token NAME`` refuses a name the tokens file would refuse (issue 27,
item 16): it printed an entry that the server then failed to load."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.cli.main import main
from agentq.server.auth import hash_token


@pytest.mark.parametrize("name", ["bad name", "local", "agentq", "x" * 201, 'quo"te'])
def test_a_name_the_tokens_file_refuses_is_refused_up_front(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", name, "--scope", "read"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no token, no entry
    assert err.startswith("agentq: error: token name ") and "Traceback" not in err


def test_a_good_name_prints_an_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "bot:eu-1", "--scope", "read"]) == 0
    assert 'name = "bot:eu-1"' in capsys.readouterr().out


def test_append_prints_only_the_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 39, item 2.2: ``$(agentq token NAME --append FILE)`` was ``token: aqt_…``,
    and every request with it got 401."""
    tokens = tmp_path / "tokens.toml"
    assert main(["token", "bot", "--scope", "read", "--append", str(tokens)]) == 0
    out, err = capsys.readouterr()
    value = out.strip()
    assert out == value + "\n" and value.startswith("aqt_")
    assert hash_token(value) in tokens.read_text() and "appended" in err
