"""``agentq token NAME`` refuses a name the tokens file would refuse (issue 27,
item 16): it printed an entry that the server then failed to load."""

from __future__ import annotations

import pytest

from agentq.cli.main import main


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
