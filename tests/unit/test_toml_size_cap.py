"""agentq's TOML files are read with a size cap (issue 27, item 16): ``--config
/dev/zero`` read without end, and any huge file was read whole into memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.errors import ConfigError
from agentq.policies import load_policies
from agentq.server.auth import TokenAuth
from agentq.tomlfiles import MAX_TOML_BYTES, read_toml


def test_an_endless_file_is_a_clear_error_naming_it_and_the_cap() -> None:
    with pytest.raises(ConfigError) as err:
        read_toml(Path("/dev/zero"), "config file")
    assert str(err.value) == (
        f"config file /dev/zero: larger than {MAX_TOML_BYTES} bytes; is it the right file?"
    )


def test_policies_and_tokens_files_are_capped_too(tmp_path: Path) -> None:
    big = "# padding\n" * (MAX_TOML_BYTES // 10 + 1)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "big.toml").write_text(big)
    (tmp_path / "tokens.toml").write_text(big)
    with pytest.raises(ConfigError, match=f"policy file .*big.toml: larger than {MAX_TOML_BYTES}"):
        load_policies(tmp_path / "policies")
    with pytest.raises(
        ConfigError, match=f"tokens file .*tokens.toml: larger than {MAX_TOML_BYTES}"
    ):
        TokenAuth.from_file(tmp_path / "tokens.toml")


def test_a_file_at_the_cap_is_read(tmp_path: Path) -> None:
    line = "# padding\n"
    text = "a = 1\n" + line * ((MAX_TOML_BYTES - 6) // len(line))
    (tmp_path / "ok.toml").write_text(text)
    assert read_toml(tmp_path / "ok.toml", "config file") == {"a": 1}
