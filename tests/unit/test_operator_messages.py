"""Messages that lead an operator on (issue 28, item 7): an unknown tool gets a
"did you mean" among the tools a caller may enqueue; ``agentq enqueue`` of a
call held for approval prints the approval id; ``agentq approve tsk_...`` says it
was given a task id and names that task's approval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentq import Runtime, ToolError, UnknownTool
from agentq.cli import main

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ["--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")]
BIG = {"order_id": "o-1", "amount": 500}  # above the shipped policy's 100: needs approval


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentq.db'}"


def _rt(db: str) -> Runtime:
    return Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies")


def test_an_unknown_tool_gets_a_did_you_mean_among_enqueueable_tools(db: str) -> None:
    with _rt(db) as rt, pytest.raises(UnknownTool) as exc:
        rt.enqueue_action("execute_refnd", BIG)
    text = str(exc.value)
    assert "did you mean 'execute_refund'" in text
    assert "request_shipping" in text
    assert "escalate" not in text and "request_approval" not in text  # internal: never enqueued


def test_a_producer_from_the_catalog_gets_the_did_you_mean_too(db: str) -> None:
    with _rt(db) as rt:
        rt.record_tools()
    with Runtime(db) as producer, pytest.raises(UnknownTool, match="did you mean 'execute_refund'"):
        producer.enqueue_action("execute_refnd", BIG)


def test_an_internal_tool_is_still_refused_as_internal(db: str) -> None:
    with _rt(db) as rt, pytest.raises(ToolError, match="internal"):
        rt.enqueue_action("escalate", {"approval_id": "x", "tool": "t", "args": {}})


def test_enqueue_of_a_gated_call_prints_its_approval_id(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["enqueue", "execute_refund", "--args", json.dumps(BIG), "--db", db, *PROJECT]) == 0
    out = capsys.readouterr().out
    with _rt(db) as rt:
        (approval,) = rt.approvals()
    assert out.split()[:2] == [approval.task_id, "awaiting_approval"]  # as before
    assert approval.approval_id in out


def test_approve_given_a_task_id_names_the_tasks_approval(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with _rt(db) as rt:
        task = rt.enqueue_action("execute_refund", BIG)
    assert task.approval_id
    status = main(["approve", task.task_id, "--by", "carol", "--db", db])
    err = capsys.readouterr().err
    assert status == 3, err
    assert f"{task.task_id} is a task id" in err and task.approval_id in err
    with _rt(db) as rt:
        assert rt.approval(task.approval_id).status == "pending"  # nothing was decided
