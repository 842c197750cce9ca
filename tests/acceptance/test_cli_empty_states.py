"""What the command line says when there is nothing to list, when given a cursor
that is none, and when the reader of its output goes away."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentq import Runtime, ToolContext, tool
from agentq.policies import ApprovalRule, Policy

AGENTQ = [sys.executable, "-m", "agentq.cli"]


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="payments")
def refund(ctx: ToolContext, args: Refund) -> dict[str, str]:
    """Refunds nothing: it only succeeds."""
    return {"refunded": args.order_id}


@pytest.fixture
def finished(tmp_path: Path) -> str:
    """A database whose tasks all finished and whose one approval was decided."""
    url = f"sqlite:///{tmp_path / 'agentq.db'}"
    policy = Policy(approvals=(ApprovalRule(tool="refund", field="amount", above=100),))
    rt = Runtime(url, tools=[refund], policies=policy)
    try:
        for order, amount in (("o-1", 5), ("o-2", 6)):
            rt.enqueue_action("refund", {"order_id": order, "amount": amount})
        held = rt.enqueue_action("refund", {"order_id": "o-3", "amount": 500})
        rt.approve(held.approval_id or "", by="alice")
        rt.worker().drain()
        assert all(t.done for t in rt.tasks())  # the refunds, and the escalation approve cancelled
    finally:
        rt.close()
    return url


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    return subprocess.run([*AGENTQ, *args], capture_output=True, text=True, timeout=60, env=env)


def test_inspect_with_only_finished_tasks_says_what_there_is(finished: str) -> None:
    shown = _run("inspect", "--db", finished)
    assert shown.returncode == 0, shown.stderr
    assert "no unfinished tasks; finished: 1 cancelled, 3 succeeded" in shown.stdout
    assert "agentq tasks --status cancelled lists them" in shown.stdout


def test_approvals_with_only_decided_ones_says_which_there_are(finished: str) -> None:
    shown = _run("approvals", "--db", finished)
    assert shown.returncode == 0, shown.stderr
    assert "no open (pending or escalated) approvals; there are 1 approved" in shown.stdout
    assert "agentq approvals --status approved" in shown.stdout


def test_a_cursor_that_is_none_is_an_error(finished: str) -> None:
    bad = _run("tasks", "--db", finished, "--after", "page-2")
    assert bad.returncode == 2
    assert "'page-2' is not a page cursor" in bad.stderr
    page = _run("tasks", "--db", finished, "--limit", "1", "--json")
    assert page.returncode == 0, page.stderr
    import json

    cursor = json.loads(page.stdout)["next_after"]
    assert _run("tasks", "--db", finished, "--after", cursor).returncode == 0


def test_a_closed_standard_output_ends_the_command_quietly(finished: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    proc = subprocess.Popen([*AGENTQ, "tasks", "--db", finished], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -1` does once it has its line
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(60) == 141
    assert err == ""
