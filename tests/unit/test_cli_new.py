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


def test_run_it_for_real_says_what_to_set_and_enqueue_and_worker_warn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, 2.5: the steps `agentq new` wrote ran a refund with
    `payments_url` unset (commented out in agentq.toml), which dead-lettered it
    without a word before. The steps say what to set first, and `agentq enqueue`
    and `agentq worker` warn in one line about a setting a tool needs."""
    import subprocess
    import sys

    project = tmp_path / "bot"
    assert main(["new", str(project)]) == 0
    readme = (project / "README.md").read_text()
    real = readme[readme.index("Run it for real"):]
    assert "payments_url" in real and "notifications_url" in real
    assert real.index("payments_url") < real.index("agentq worker")
    monkeypatch.chdir(project)
    monkeypatch.delenv("AGENTQ_DB", raising=False)
    assert main(["init"]) == 0
    capsys.readouterr()
    refund = ["enqueue", "execute_refund", "--args", '{"order_id": "o-1", "amount": 30}']
    assert main(refund) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("agentq: warning: ")]
    assert len(warnings) == 1 and "payments_url (read by execute_refund)" in warnings[0], err
    assert "notifications_url" not in warnings[0]  # only what this tool needs
    assert main([*refund, "--setting", "payments_url=http://127.0.0.1:9"]) == 0
    assert "warning" not in capsys.readouterr().err
    worker = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "worker", "--once", "--queue", "payments"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [line for line in worker.stderr.splitlines() if "unset setting(s)" in line]
    assert len(lines) == 1 and "WARNING agentq.worker" in lines[0], worker.stderr
    assert "payments_url (read by execute_refund)" in lines[0], worker.stderr
