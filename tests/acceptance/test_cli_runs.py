"""``agentq runs``, ``agentq runs show`` and ``agentq runs cancel`` as a user runs
them: a database with durable agent runs in every state (made in process with
the scripted model of :mod:`tests.run_world`), read and changed by the real
command, its output and exit statuses as documented (3 no such run, 5 a run
that is done; one ``agentq: error:`` line, no traceback)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.ledger import TaskStatus
from tests.run_world import MockModel, run_runtime

from ._project import agentq

pytestmark = pytest.mark.slow


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A database URL and its runs by what they are: ``done`` (two turns: a local
    call, a refund task and a refused call, then the answer), ``echo`` (answered
    at once, another agent and owner), ``approval`` (its refund awaits a human),
    ``waiting`` (its refund is queued) and ``queued`` (its first turn is)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    rt = run_runtime(url, MockModel())
    try:
        ids = {
            "done": rt.start_run("refunds", "refund 40 and more", by="refund-agent").run_id,
            "echo": rt.start_run("echo", "hello", by="bot").run_id,
            "approval": rt.start_run("refunds", "refund 500", by="refund-agent").run_id,
        }
        rt.worker(receive_timeout=0.05).drain()
        ids["waiting"] = rt.start_run("refunds", "refund 20", by="refund-agent").run_id
        rt.worker(queues=["agent_turns"], receive_timeout=0.05).drain()
        ids["queued"] = rt.start_run("echo", "later").run_id
    finally:
        rt.close()
    yield url, ids


def test_runs_lists_newest_first_a_page_at_a_time(
    world: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, ids = world
    listed = agentq("runs", "--db", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["run_id", "agent", "owner", "status", "turn", "tokens",
                              "updated_at", "outcome"]  # fmt: skip
    order = ["queued", "waiting", "approval", "echo", "done"]  # newest first
    assert [r.split()[0] for r in rows] == [ids[k] for k in order]
    assert rows[3].split()[1:6] == ["echo", "bot", "succeeded", "1", "15"]
    assert rows[3].endswith("echo: hello")
    assert rows[1].split()[3] == "awaiting_tools" and rows[2].split()[3] == "awaiting_approval"

    as_json = json.loads(agentq("runs", "--db", url, "--json", cwd=tmp_path).stdout)
    assert [r["run_id"] for r in as_json["runs"]] == [ids[k] for k in order]
    assert as_json["next_after"] is None and "tokens" not in as_json["runs"][0]

    first = json.loads(agentq("runs", "--db", url, "--limit", "2", "--json", cwd=tmp_path).stdout)
    rest = json.loads(agentq("runs", "--db", url, "--after", first["next_after"], "--json",
                             cwd=tmp_path).stdout)  # fmt: skip
    assert [r["run_id"] for r in first["runs"] + rest["runs"]] == [ids[k] for k in order]

    def only(*flags: str) -> list[str]:
        done = agentq("runs", "--db", url, "--jsonl", *flags, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return [json.loads(line)["run_id"] for line in done.stdout.splitlines()]

    assert only("--status", "succeeded") == [ids["echo"], ids["done"]]
    assert only("--agent", "echo") == [ids["queued"], ids["echo"]]
    assert only("--owner", "local") == [ids["queued"]]
    assert only("--status", "failed") == []
    assert "no runs" in agentq("runs", "--db", url, "--agent", "nobody", cwd=tmp_path).stdout


def test_runs_show_has_the_turns_their_tokens_and_latency_and_the_calls_tasks(
    world: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, ids = world
    shown = agentq("runs", "show", ids["done"], "--db", url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "status           succeeded" in out
    assert "tokens           30 (20 prompt, 10 completion, cost 0.04)" in out
    assert "output           done: error: no tool 'transfer_funds'" in out
    assert "turn 1  3 calls  tokens 15 (10 prompt, 5 completion, cost 0.02)  latency " in out
    assert "turn 2  answered  tokens 15" in out
    calls = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert calls[0] == ["call", "tool", "task", "status", "args"]
    assert calls[1][:5] == ["0", "note_order", "local", "ran", "locally"]
    assert calls[2][1] == "refund_order" and calls[2][2].startswith("tsk_")
    assert calls[2][3] == "succeeded"
    assert calls[3][:4] == ["2", "transfer_funds", "-", "refused"]

    as_json = json.loads(agentq("runs", "show", ids["done"], "--db", url, "--json",
                                cwd=tmp_path).stdout)  # fmt: skip
    first = as_json["turns"][0]
    assert first["usage"]["total_tokens"] == 15 and first["latency_ms"] is not None
    assert [c["task_status"] for c in first["calls"]] == [None, "succeeded", None]
    assert as_json["output"].startswith("done: ")

    waiting = agentq("runs", "show", ids["approval"], "--db", url, cwd=tmp_path).stdout
    assert "awaiting_approval" in waiting and "awaits approval apr_" in waiting
    assert "(agentq approve apr_" in waiting
    queued = agentq("runs", "show", ids["queued"], "--db", url, cwd=tmp_path).stdout
    assert "turn 1  queued  task tsk_" in queued


def test_runs_cancel_cancels_the_run_and_its_queued_calls(
    world: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, ids = world
    run_id = ids["waiting"]
    # --db before the verb is kept too.
    done = agentq("runs", "--db", url, "cancel", run_id, "--reason", "wrong order",
                  "--by", "alice", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{run_id} cancelled"
    rt = run_runtime(url, MockModel())
    try:
        run = rt.run(run_id)
        assert run.error == "wrong order (by alice)" and run.pending == []
        (call,) = [c for c in run.turns[0].calls if c.task_id]
        assert rt.task(str(call.task_id)).status is TaskStatus.CANCELLED
        assert [e.actor for e in rt.audit_log(target=run_id)] == ["alice"]
    finally:
        rt.close()

    again = agentq("runs", "cancel", run_id, "--db", url, cwd=tmp_path)
    assert again.returncode == 5 and again.stdout == ""
    assert again.stderr.startswith("agentq: error: ") and len(again.stderr.splitlines()) == 1
    assert "is cancelled" in again.stderr and "Traceback" not in again.stderr

    as_json = agentq("runs", "cancel", ids["queued"], "--json", "--db", url, cwd=tmp_path)
    assert json.loads(as_json.stdout)["status"] == "cancelled"


@pytest.mark.parametrize("verb", ["show", "cancel"])
def test_an_unknown_run_is_exit_3_in_one_line(
    world: tuple[str, dict[str, str]], tmp_path: Path, verb: str
) -> None:
    url, _ = world
    done = agentq("runs", verb, "run_nope", "--db", url, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr == "agentq: error: no run 'run_nope'\n"


def test_usage_errors_name_what_is_wrong(world: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    url, _ = world
    for args, says in [
        (["--status", "bogus"], "invalid choice: 'bogus'"),
        (["--after", "tsk_1"], "not a page cursor"),
        (["--limit", "1001"], "at most 1000"),
        (["show"], "run_id"),
    ]:
        done = agentq("runs", *args, "--db", url, cwd=tmp_path)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
    missing = agentq("runs", "--db", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("agentq: error: no database")
    assert not (tmp_path / "none.db").exists()
