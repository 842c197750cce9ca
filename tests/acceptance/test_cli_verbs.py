"""The CLI's core verbs (issue 12, "The CLI lacks the core verbs"): enqueue,
task, tasks, approvals, approve/reject, cancel, --version; --json / --jsonl on
listings; the documented exit statuses; errors without tracebacks unless --debug.
Before, none of these verbs existed and a shell script had to write Python."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from ._project import agentq, make_project

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path) -> Path:
    make_project(tmp_path)
    assert agentq("init", cwd=tmp_path).returncode == 0
    return tmp_path


def _id(proc: object) -> str:
    assert proc.returncode == 0, proc.stderr  # type: ignore[attr-defined]
    return str(proc.stdout.split()[0])  # type: ignore[attr-defined]


def test_version() -> None:
    proc = agentq("--version", cwd=Path.cwd())
    assert proc.returncode == 0 and proc.stdout.startswith("agentq 0."), proc.stdout


def test_enqueue_task_and_tasks(project: Path) -> None:
    (project / "args.json").write_text('{"name": "from-file"}')
    first = _id(agentq("enqueue", "flaky", "--args", '{"name": "a"}', cwd=project))
    second = _id(agentq("enqueue", "flaky", "--args", "@args.json", cwd=project))
    piped = agentq(
        "enqueue", "broken", "--args", "@-", "--json", cwd=project, stdin='{"name": "p"}'
    )
    assert piped.returncode == 0 and json.loads(piped.stdout)["args"] == {"name": "p"}
    again = agentq("enqueue", "flaky", "--args", '{"name": "a"}', "--idempotency-key", "k1",
                   cwd=project)  # fmt: skip
    same = agentq("enqueue", "flaky", "--args", '{"name": "a"}', "--idempotency-key", "k1",
                  cwd=project)  # fmt: skip
    assert _id(again) == _id(same)
    later = agentq("enqueue", "flaky", "--args", '{"name": "l"}', "--delay", "3600", "--json",
                   cwd=project)  # fmt: skip
    assert json.loads(later.stdout)["next_attempt_at"] is not None or later.returncode == 0

    shown = agentq("task", first, "--json", cwd=project)
    assert shown.returncode == 0 and json.loads(shown.stdout)["args"] == {"name": "a"}
    table = agentq("task", second, cwd=project)
    assert "from-file" in table.stdout and "status" in table.stdout

    doc = json.loads(agentq("tasks", "--tool", "flaky", "--json", cwd=project).stdout)
    assert {t["task_id"] for t in doc["tasks"]} >= {first, second}
    assert all(t["tool"] == "flaky" for t in doc["tasks"]) and doc["next_after"] is None
    lines = agentq("tasks", "--status", "queued", "--jsonl", cwd=project).stdout.splitlines()
    assert len(lines) == 5 and all(json.loads(line)["status"] == "queued" for line in lines)
    page = json.loads(agentq("tasks", "--limit", "2", "--json", cwd=project).stdout)
    assert len(page["tasks"]) == 2 and page["next_after"]
    rest = json.loads(agentq("tasks", "--after", page["next_after"], "--json", cwd=project).stdout)
    ids = [t["task_id"] for t in page["tasks"] + rest["tasks"]]
    assert len(ids) == len(set(ids)) == 5
    since = agentq("tasks", "--since", "2999-01-01T00:00:00Z", cwd=project)
    assert since.stdout.strip() == "no tasks"


def test_exit_statuses_and_errors(project: Path) -> None:
    missing = agentq("task", "tsk_nope", cwd=project)
    assert missing.returncode == 3
    assert missing.stderr == "agentq: error: no task 'tsk_nope'\n"
    debug = agentq("--debug", "task", "tsk_nope", cwd=project)
    assert debug.returncode == 3 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.endswith("agentq: error: no task 'tsk_nope'\n")
    task = _id(agentq("enqueue", "flaky", "--args", '{"name": "w"}', cwd=project))
    waited = agentq("task", task, "--wait", "0.3", cwd=project)  # no worker: still queued
    assert waited.returncode == 4 and "still queued after the wait" in waited.stderr
    timed = agentq("enqueue", "flaky", "--args", '{"name": "w2"}', "--wait", "0.3", cwd=project)
    assert timed.returncode == 4
    usage = agentq("tasks", "--limit", "0", cwd=project)
    assert usage.returncode == 2 and "--limit: must be at least 1" in usage.stderr


def test_approvals_approve_reject_and_cancel(project: Path) -> None:
    big = agentq("enqueue", "payout", "--args", '{"amount": 500}', "--json", cwd=project)
    other = agentq("enqueue", "payout", "--args", '{"amount": 900}', "--json", cwd=project)
    big_task, other_task = json.loads(big.stdout), json.loads(other.stdout)
    assert big_task["status"] == other_task["status"] == "awaiting_approval"

    inbox = json.loads(agentq("approvals", "--oldest-first", "--json", cwd=project).stdout)[
        "approvals"
    ]  # fmt: skip
    assert [a["task_id"] for a in inbox] == [big_task["task_id"], other_task["task_id"]]
    assert all(a["status"] == "pending" and a["age_s"] >= 0 for a in inbox)
    table = agentq("approvals", cwd=project).stdout
    assert table.splitlines()[0].split()[:3] == ["approval_id", "status", "tool"]

    first, second = inbox[0]["approval_id"], inbox[1]["approval_id"]
    ok = agentq("approve", first, "--by", "alice", "--note", "checked", "--json", cwd=project)
    assert ok.returncode == 0, ok.stderr
    decided = json.loads(ok.stdout)
    assert decided["approval"]["decided_by"] == "alice"
    assert decided["approval"]["decision_note"] == "checked"
    assert decided["task"]["status"] == "queued"
    twice = agentq("approve", first, "--by", "bob", cwd=project)
    assert twice.returncode == 5 and twice.stderr.startswith("agentq: error: ")
    assert agentq("approve", "nope", "--by", "bob", cwd=project).returncode == 3
    assert agentq("approve", second, "--by", " ", cwd=project).returncode == 2
    no = agentq("reject", second, "--by", "carol", "--note", "too much", cwd=project)
    assert no.returncode == 0 and "rejected by carol" in no.stdout
    # An empty inbox says which approvals there are instead.
    assert agentq("approvals", cwd=project).stdout.strip() == (
        "no open (pending or escalated) approvals; there are 1 approved, 1 rejected "
        "(agentq approvals --status approved)"
    )
    done = json.loads(agentq("approvals", "--status", "approved", "--json", cwd=project).stdout)
    assert [a["approval_id"] for a in done["approvals"]] == [first]

    queued = _id(agentq("enqueue", "flaky", "--args", '{"name": "c"}', cwd=project))
    cancel = agentq("cancel", queued, cwd=project)
    assert cancel.returncode == 0 and cancel.stdout.split() == [queued, "cancelled"]
    assert agentq("cancel", queued, cwd=project).returncode == 5
    assert agentq("cancel", "tsk_nope", cwd=project).returncode == 3
    other = _id(agentq("enqueue", "flaky", "--args", '{"name": "d"}', cwd=project))
    assert agentq("cancel", other, "--by", "dave", cwd=project).returncode == 0
    # The audit names who cancelled: --by, else the login name, never "(unnamed)".
    from agentq import Runtime

    with Runtime(f"sqlite:///{project / 'agentq.db'}") as rt:
        assert [e.actor for e in rt.audit_log(target=other)] == ["dave"]
        assert [e.actor for e in rt.audit_log(target=queued)] == [getpass.getuser()]


def test_approve_edits_the_arguments_with_set_or_args(project: Path) -> None:
    asked = json.loads(
        agentq("enqueue", "payout", "--args", '{"amount": 500}', "--json", cwd=project).stdout
    )
    approval_id = asked["approval_id"]
    bad = agentq("approve", approval_id, "--by", "alice", "--set", "amount=oops", cwd=project)
    assert bad.returncode == 2 and "amount" in bad.stderr and "Traceback" not in bad.stderr
    not_json = agentq("approve", approval_id, "--by", "alice", "--args", "{", cwd=project)
    assert not_json.returncode == 2 and "--args is not JSON" in not_json.stderr
    pending = json.loads(agentq("approvals", "--json", cwd=project).stdout)["approvals"]
    assert [a["status"] for a in pending] == ["pending"]  # nothing was decided
    ok = agentq("approve", approval_id, "--by", "alice", "--set", "amount=40", "--json",
                cwd=project)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    decided = json.loads(ok.stdout)
    assert decided["task"]["args"] == {"amount": 40} and decided["task"]["status"] == "queued"
    assert decided["approval"]["args"] == {"amount": 500}
    assert decided["approval"]["approved_args"] == {"amount": 40}

    other = json.loads(
        agentq("enqueue", "payout", "--args", '{"amount": 700}', "--json", cwd=project).stdout
    )
    whole = agentq("approve", other["approval_id"], "--by", "bob", "--args", '{"amount": 90}',
                   "--json", cwd=project)  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["task"]["args"] == {"amount": 90}


def test_deeply_nested_json_is_a_clean_error(project: Path) -> None:
    # Issue 27, item 13: json.loads' RecursionError was a traceback.
    deep = "[" * 50_000 + "]" * 50_000
    wrapped = '{"name": ' + deep + "}"
    for argv in (["enqueue", "flaky", "--args", deep], ["enqueue", "flaky", "--args", wrapped]):
        proc = agentq(*argv, cwd=project)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("agentq: error: --args is not JSON: JSON nested deeper")
        assert "Traceback" not in proc.stderr
    task = _id(agentq("enqueue", "flaky", "--args", '{"name": "n"}', cwd=project))
    resolved = agentq("resolve", task, "--succeeded", deep, cwd=project)
    assert resolved.returncode == 2 and "nested deeper" in resolved.stderr, resolved.stderr
    asked = agentq("enqueue", "payout", "--args", '{"amount": 500}', "--json", cwd=project)
    approval_id = json.loads(asked.stdout)["approval_id"]
    approve = agentq("approve", approval_id, "--by", "alice", "--args", wrapped, cwd=project)
    assert approve.returncode == 2 and "nested deeper" in approve.stderr, approve.stderr
