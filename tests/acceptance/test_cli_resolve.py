"""``agentq resolve ID``: an operator resolves a task parked as outcome_unknown
from the command line, audited under their name (issue 13, item 16)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from agentq import OutcomeUnknown, Runtime, TaskStatus, ToolContext, tool


class Job(BaseModel):
    name: str


@tool(queue="ops", idempotent=False)
def unsure(ctx: ToolContext, args: Job) -> dict[str, str]:
    raise OutcomeUnknown("the answer was lost")


def _agentq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _parked(db: str) -> list[str]:
    with Runtime(db, tools=[unsure]) as rt:
        rt.record_tools()
        ids = [rt.enqueue_action("unsure", {"name": n}).task_id for n in ("a", "b", "c")]
        rt.worker(receive_timeout=0.05).drain()
        assert {rt.task(i).status for i in ids} == {TaskStatus.OUTCOME_UNKNOWN}
    return ids


def test_resolve_succeeded_retry_and_failed(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'agentq.db'}"
    ok, again, gone = _parked(db)
    listed = _agentq("tasks", "--status", "outcome_unknown", "--json", "--db", db, cwd=tmp_path)
    assert {t["task_id"] for t in json.loads(listed.stdout)["tasks"]} == {ok, again, gone}
    shown = _agentq("task", ok, "--db", db, cwd=tmp_path)
    assert "outcome_unknown" in shown.stdout and "no reconcile handler" in shown.stdout

    done = _agentq("resolve", ok, "--succeeded", '{"found": "ch_1"}', "--by", "ann",
                   "--note", "in the dashboard", "--json", "--db", db, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == {"found": "ch_1"}
    retried = _agentq("resolve", again, "--retry", "--db", db, cwd=tmp_path)
    assert retried.returncode == 0 and retried.stdout.split() == [again, "queued"]
    failed = _agentq("resolve", gone, "--failed", "--db", db, cwd=tmp_path)
    assert failed.returncode == 0 and failed.stdout.split() == [gone, "dead"]

    twice = _agentq("resolve", ok, "--retry", "--db", db, cwd=tmp_path)
    assert twice.returncode != 0 and twice.stderr.startswith("agentq: error: ")
    assert "only an outcome_unknown task" in twice.stderr and "Traceback" not in twice.stderr
    bad = _agentq("resolve", gone, "--succeeded", "{nope", "--db", db, cwd=tmp_path)
    assert bad.returncode != 0 and "--succeeded takes the call's result as JSON" in bad.stderr
    with Runtime(db) as rt:
        [entry] = [e for e in rt.audit_log() if e.target == ok]
        expected = ("ann", "resolve", "succeeded: in the dashboard")
        assert (entry.actor, entry.action, entry.note) == expected
