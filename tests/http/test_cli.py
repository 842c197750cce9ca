"""`agentq serve` refuses to serve without authentication; `agentq token`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentq.cli import main
from agentq.server.auth import TokenAuth, hash_token

ROOT = Path(__file__).resolve().parents[2]


def test_serve_needs_tokens_or_insecure_local_on_loopback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'a.db'}"]
    assert main(["serve", *db]) == 2
    assert "needs --tokens FILE" in capsys.readouterr().err
    assert main(["serve", *db, "--insecure-local", "--host", "0.0.0.0"]) == 2
    assert "loopback only" in capsys.readouterr().err
    assert main(["serve", *db, "--tokens", str(tmp_path / "nope.toml"), "--insecure-local"]) == 2
    assert "not both" in capsys.readouterr().err


def test_a_bad_tokens_file_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text('[[tokens]]\nname = "x"\nscopes = ["root"]\nsha256 = "abc"\n')
    assert main(["serve", "--db", f"sqlite:///{tmp_path / 'a.db'}", "--tokens", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentq: error: ") and "scopes" in err and "sha256" in err
    assert "Traceback" not in err


def test_token_prints_a_token_and_the_entry_that_admits_only_its_digest(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "agentq.cli", "token", "bot", "--scope", "read",
                          "--scope", "enqueue"], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout  # fmt: skip
    token = out.splitlines()[0].removeprefix("token: ")
    entry = out.split("\n", 1)[1]
    assert token not in entry and hash_token(token) in entry
    (tmp_path / "tokens.toml").write_text(entry)
    TokenAuth.from_file(tmp_path / "tokens.toml")  # loads


def test_token_append_writes_entries_the_server_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28, item 15: ``agentq token NAME > tokens.toml`` gave an invalid file
    (the token line is not TOML); ``--append FILE`` writes only the entry."""
    file = tmp_path / "tokens.toml"
    assert main(["token", "bot", "--scope", "enqueue", "--append", str(file)]) == 0
    bot = capsys.readouterr().out.strip()
    assert main(["token", "alice", "--scope", "approve", "--append", str(file)]) == 0
    alice = capsys.readouterr().out.strip()
    text = file.read_text()
    assert bot not in text and alice not in text  # only digests
    auth = TokenAuth.from_file(file)
    assert {p.name for p in auth._digests.values()} == {"bot", "alice"}
    assert auth._digests[hash_token(bot)].name == "bot"
    assert file.stat().st_mode & 0o077 == 0  # readable by its owner only


def test_token_append_refuses_a_file_that_is_not_a_tokens_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "tokens.toml"
    file.write_text("token: abc\n")  # what `agentq token NAME > tokens.toml` used to make
    assert main(["token", "bot", "--scope", "read", "--append", str(file)]) == 2
    assert "agentq: error: " in capsys.readouterr().err
    assert file.read_text() == "token: abc\n"  # left as it was


def test_tokens_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from agentq.errors import ConfigError

    file = tmp_path / "tokens.toml"
    file.write_text('[[tokens]]\nname = "alice"\nscopes = ["approve"]\nenv = "ALICE_TOKEN"\n')
    with pytest.raises(ConfigError, match="ALICE_TOKEN is not set"):
        TokenAuth.from_file(file)
    monkeypatch.setenv("ALICE_TOKEN", "s3cret-long-enough-0123")
    TokenAuth.from_file(file)


# -- issue 40 items 13 and 14: the tokens file's errors and mode -------------------------------

PASTED = "aqt_" + "PastedPlaintextToken0123456789abcdefXYZ_-"


@pytest.mark.parametrize("line", [
    f'sha256 = "{PASTED}"',  # the token where its digest goes
    f'token = "{PASTED}"',  # a field of its own
    f'env = "{PASTED}"',  # where a variable's name goes
    f'sha256 = "{hash_token("x")}"\nsecret = "{PASTED}"',
])  # fmt: skip
def test_a_pasted_plaintext_token_is_refused_without_printing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    """Item 13: the error named the value, so the secret reached stderr, journald
    and CI logs. It names the entry (its place and name) and the field only."""
    bad = tmp_path / "tokens.toml"
    bad.write_text(
        f'[[tokens]]\nname = "ok"\nscopes = ["read"]\nsha256 = "{hash_token("y")}"\n\n'
        f'[[tokens]]\nname = "pasted-bot"\nscopes = ["read"]\n{line}\n'
    )
    assert main(["serve", "--db", f"sqlite:///{tmp_path / 'a.db'}", "--tokens", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentq: error: ") and "Traceback" not in err
    assert PASTED not in err and PASTED[:12] not in err, err
    assert "tokens[1]" in err and "pasted-bot" in err, err


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664, 0o620, 0o602])
def test_a_tokens_file_others_may_write_is_refused_naming_its_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    """Item 14: anyone who may write the file may grant themselves any scope.
    Refused as ssh refuses such an authorized_keys: served, and appended to."""
    from agentq.errors import ConfigError

    file = tmp_path / "tokens.toml"
    assert main(["token", "bot", "--scope", "read", "--append", str(file)]) == 0
    capsys.readouterr()
    file.chmod(mode)
    with pytest.raises(ConfigError, match=f"mode {mode:04o}.*writable by"):
        TokenAuth.from_file(file)
    assert main(["serve", "--db", f"sqlite:///{tmp_path / 'a.db'}", "--tokens", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentq: error: ") and f"{mode:04o}" in err and str(file) in err
    before = file.read_text()
    assert main(["token", "eve", "--scope", "admin", "--append", str(file)]) == 2
    assert f"{mode:04o}" in capsys.readouterr().err
    assert file.read_text() == before
    file.chmod(0o644)  # readable by all is fine: the file holds digests only
    TokenAuth.from_file(file)


def test_a_tokens_file_owned_by_another_user_is_refused_naming_the_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from agentq.errors import ConfigError

    file = tmp_path / "tokens.toml"
    assert main(["token", "bot", "--scope", "read", "--append", str(file)]) == 0
    capsys.readouterr()
    if os.geteuid() == 0:  # root (a container): give the file to another user
        os.chown(file, 4242, -1)
    else:  # as another user (not root) would see it
        mine = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: mine + 4242)
    owner = file.stat().st_uid
    with pytest.raises(ConfigError, match=f"owned by uid {owner}"):
        TokenAuth.from_file(file)
    assert main(["token", "eve", "--scope", "admin", "--append", str(file)]) == 2
    assert f"uid {owner}" in capsys.readouterr().err
