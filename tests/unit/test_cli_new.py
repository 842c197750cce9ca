"""``agentq new DIR`` writes inside DIR only (issue 40 item 11): a dangling
symlink named like one of its files made it write wherever the link pointed."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.cli import main


@pytest.mark.parametrize("name", ["README.md", "agentq.toml", ".gitignore", "tools", "policies"])
def test_new_does_not_follow_a_dangling_symlink_out_of_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    project, outside = tmp_path / "bot", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / name).symlink_to(outside / "planted")  # dangling: planted does not exist
    assert main(["new", str(project)]) == 2
    _, err = capsys.readouterr()
    assert not (outside / "planted").exists(), "agentq new wrote outside its folder"
    assert err.startswith("agentq: error: ") and err.count("\n") == 1, err
    assert name in err and "Traceback" not in err, err
    assert (project / name).is_symlink()  # left as it was


def test_new_creates_each_file_exclusively_without_following_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted between the check and the write (a race) is refused too:
    each file is created with O_EXCL | O_NOFOLLOW, never opened as it is."""
    from agentq.demo import scaffold
    from agentq.errors import ConfigError

    project, outside = tmp_path / "bot", tmp_path / "outside"
    outside.mkdir()
    real_mkdir = Path.mkdir

    def mkdir_then_plant(self: Path, *args: object, **kwargs: object) -> None:
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]
        if self == project:  # right after the checks: the attacker's link appears
            (project / "agentq.toml").symlink_to(outside / "planted")

    monkeypatch.setattr(Path, "mkdir", mkdir_then_plant)
    with pytest.raises(ConfigError, match=r"agentq\.toml"):
        scaffold.new_project(project)
    assert not (outside / "planted").exists()


def test_new_still_writes_a_project_into_a_new_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", str(tmp_path / "bot")]) == 0
    names = {p.name for p in (tmp_path / "bot").iterdir()}
    assert {"README.md", "agentq.toml", ".gitignore", "tools", "policies"} <= names
