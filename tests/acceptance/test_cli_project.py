"""The CLI works on the project the user names, and typos fail (issue 12, "It
silently uses the wrong project" and "Typos succeed").

Before: from a folder without ``tools/`` the worker served the agentq checkout's
refund-bot tools; a project without ``policies/`` got the refund bot's policy;
read-only commands on a mistyped ``--db`` created an empty database and exited
0; ``--config /nonexistent.toml`` was ignored; a config's ``db`` resolved from
the current folder; ``--queue nosuchqueue`` was served forever; ``init
--print-ddl`` on SQLite ignored the flag; ``[tools.okk]`` was accepted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ._project import agentq, make_project

pytestmark = pytest.mark.slow


def _clean_error(proc: object, *parts: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)  # type: ignore[attr-defined]
    err: str = proc.stderr  # type: ignore[attr-defined]
    assert err.startswith("agentq: error: ") and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


def test_a_folder_without_tools_is_an_error_not_the_refund_bot(tmp_path: Path) -> None:
    proc = agentq("worker", "--db", f"sqlite:///{tmp_path / 'w.db'}", cwd=tmp_path)
    _clean_error(proc, f"no tools/ folder in {tmp_path}", "--tools")
    assert not (tmp_path / "w.db").exists()


def test_a_project_without_policies_gets_the_default_policy(tmp_path: Path) -> None:
    make_project(tmp_path, policy=None)
    init = agentq("init", cwd=tmp_path)  # was: approval rule for unknown tool 'execute_refund'
    assert init.returncode == 0, init.stderr
    assert "queues escalations, ops" in init.stdout
    enq = agentq("enqueue", "payout", "--args", '{"amount": 500}', cwd=tmp_path)
    assert enq.returncode == 0, enq.stderr
    assert enq.stdout.split()[1] == "queued"  # no approval rule: the refund bot's is not here


@pytest.mark.parametrize(
    "command",
    [["inspect"], ["inspect", "--watch", "1", "--count", "1"], ["tasks"], ["task", "tsk_x"],
     ["approvals"], ["workers"], ["dlq", "list"], ["dlq", "delete", "x"], ["cancel", "tsk_x"],
     ["approve", "a1", "--by", "me"]],
)  # fmt: skip
def test_commands_on_a_mistyped_database_create_nothing(tmp_path: Path, command: list[str]) -> None:
    proc = agentq(*command, "--db", "sqlite:///does-not-exist.db", cwd=tmp_path)
    _clean_error(proc, "no database at does-not-exist.db")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    make_project(tmp_path)
    for command in (["init"], ["tasks"], ["inspect"]):
        proc = agentq(*command, "--config", str(tmp_path / "nonexistent.toml"), cwd=tmp_path)
        _clean_error(proc, f"config file {tmp_path / 'nonexistent.toml'} does not exist")


def test_every_path_in_agentq_toml_is_relative_to_the_file(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    (project / "agentq.toml").write_text(
        '[agentq]\ndb = "sqlite:///state/agentq.db"\ntools = "tools"\npolicies = "policies"\n'
    )
    (project / "state").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    init = agentq("init", "--config", str(project / "agentq.toml"), cwd=elsewhere)
    assert init.returncode == 0, init.stderr
    assert (project / "state" / "agentq.db").exists()
    assert list(elsewhere.iterdir()) == []
    listed = agentq("tasks", "--config", str(project / "agentq.toml"), cwd=elsewhere)
    assert listed.returncode == 0 and listed.stdout.strip() == "no tasks", listed.stderr


def test_an_unknown_queue_fails_fast(tmp_path: Path) -> None:
    make_project(tmp_path)
    proc = agentq("worker", "--queue", "nosuchqueue", cwd=tmp_path)  # was: served forever
    _clean_error(proc, "unknown queue(s) 'nosuchqueue'", "escalations, ops")


def test_print_ddl_on_sqlite_is_an_error(tmp_path: Path) -> None:
    make_project(tmp_path)
    _clean_error(agentq("init", "--print-ddl", cwd=tmp_path), "--print-ddl", "needs no DDL")


def test_a_policy_for_an_unknown_tool_is_an_error(tmp_path: Path) -> None:
    make_project(tmp_path, policy='[tools.flakyy]\nallowed_hosts = ["127.0.0.1"]\n')
    for command in (["init"], ["worker"], ["enqueue", "flaky", "--args", '{"name": "a"}']):
        proc = agentq(*command, cwd=tmp_path)
        _clean_error(proc, "unknown tool(s) 'flakyy'", "known tools: broken, flaky, payout, slow)")


def test_bad_arguments_to_enqueue_are_clean_errors(tmp_path: Path) -> None:
    make_project(tmp_path)
    cases = {
        ("--args", "{nope"): "--args is not JSON",
        ("--args", "[1]"): "--args must be a JSON object, got list",
        ("--args", "@missing.json"): "--args file missing.json does not exist",
        ("--args", "{}", "--at", "2030-01-01T00:00"): "give the time zone",
    }
    for extra, message in cases.items():
        proc = agentq("enqueue", "flaky", *extra, cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.stderr)
    unknown = agentq("enqueue", "nosuchtool", "--args", "{}", cwd=tmp_path)
    _clean_error(unknown, "nosuchtool")
    invalid = agentq("enqueue", "flaky", "--args", '{"nam": 1}', cwd=tmp_path)
    _clean_error(invalid, "name")
