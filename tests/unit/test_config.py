"""agentq.toml: every problem is a ConfigError naming the file, field and value (defect 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.config import load_config
from agentq.errors import ConfigError


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"[agentq]\ndatabase = 'x'\n", "agentq.database = 'x': unknown key (known: db, "),
        (b"agentq = 5\n", "agentq = 5: Input should be a valid dictionary"),
        (b"settings = [1]\n", "settings = [1]: Input should be a valid dictionary"),
        (b"[agentq]\ndb = 7\n", "agentq.db = 7: Input should be a valid string"),
        (b"[agentq]\ndb = '\xff'\n", "not UTF-8: byte 0xff on line 2 (offset 15)"),
        (b"[agentq\n", "invalid TOML: Expected ']' at the end of a table declaration (at line 1"),
    ],
)
def test_bad_agentq_toml(tmp_path: Path, content: bytes, expected: str) -> None:
    file = tmp_path / "agentq.toml"
    file.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(file)
    assert str(info.value).startswith(f"config file {file}: {expected}")
    assert info.value.__cause__ is not None


def test_absent_file_is_an_empty_config(tmp_path: Path) -> None:
    assert load_config(tmp_path / "agentq.toml").agentq.db is None


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "agentq.toml").mkdir()  # exists, cannot be read as a file
    with pytest.raises(ConfigError, match=r"config file .*agentq.toml: cannot be read: "):
        load_config(tmp_path / "agentq.toml")


@pytest.mark.parametrize(
    ("kind", "content", "expected"),
    [
        ("config", "[agentq]\ntols = 'tools'\n",
         "agentq.tols = 'tools': unknown key: did you mean 'tools'?"),
        ("config", "[setings]\nx = 1\n",
         "setings = {'x': 1}: unknown key: did you mean 'settings'?"),
        ("policy", "[defaults]\nmax_atempts = 5\n",
         "defaults.max_atempts = 5: unknown key: did you mean 'max_attempts'?"),
        ("policy", "[tools.pay]\nalowed_hosts = ['h']\n",
         "tools.pay.alowed_hosts = ['h']: unknown key: did you mean 'allowed_hosts'?"),
        ("policy", "[[approvals]]\ntool = 'pay'\nfeld = 'amount'\nabove = 5\n",
         "approvals[0].feld = 'amount': unknown key: did you mean 'field'?"),
    ],
)  # fmt: skip
def test_a_misspelt_key_is_one_line_with_file_key_and_suggestion(
    tmp_path: Path, kind: str, content: str, expected: str
) -> None:
    """Issue 39, 2.12: a typo got pydantic's "Extra inputs are not permitted"
    and no suggestion."""
    from agentq.policies import load_policies

    file = tmp_path / ("agentq.toml" if kind == "config" else "refunds.toml")
    file.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_config(file) if kind == "config" else load_policies(tmp_path)
    assert str(info.value) == f"{kind} file {file}: {expected}"
