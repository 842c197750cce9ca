"""agentq.toml: every problem is a ConfigError naming the file, field and value (defect 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.config import load_config
from agentq.errors import ConfigError


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"[agentq]\ndatabase = 'x'\n", "agentq.database = 'x': Extra inputs are not permitted"),
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
