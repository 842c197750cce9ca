"""A producer enqueues by tool name without the tools' code: the database's tool catalog.

A runtime with tools (``agentq init``, a worker) records each tool's queue and
argument JSON Schema, and its policy; ``Runtime(db)`` validates calls against
those records and applies the recorded approval rules at enqueue.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq import FakeClock, InvalidArguments, Runtime, TaskStatus, ToolError, UnknownTool
from agentq.demo_server import DemoAPI
from agentq.errors import ConfigError
from tests.runtime.conftest import settings_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentq.db'}"


@pytest.fixture
def worker_rt(db: str, clock: FakeClock, api: DemoAPI) -> Iterator[Runtime]:
    rt = Runtime(
        db, tools=ROOT / "tools", policies=ROOT / "policies", clock=clock,
        settings=settings_for(api),
    )  # fmt: skip
    rt.record_tools()  # as `agentq init` does
    yield rt
    rt.close()


@pytest.fixture
def producer(db: str, clock: FakeClock, worker_rt: Runtime) -> Iterator[Runtime]:
    rt = Runtime(db, clock=clock)  # no tools, no policies: all from the database
    yield rt
    rt.close()


def test_a_producer_without_tools_enqueues_what_a_worker_runs(
    producer: Runtime, worker_rt: Runtime
) -> None:
    task = producer.enqueue_action("execute_refund", {"order_id": "o-1", "amount": 30})
    assert task.status == TaskStatus.QUEUED
    # Defaults filled in and numbers as the tool's model gives them.
    assert task.args == {"order_id": "o-1", "amount": 30.0, "currency": "USD", "reason": ""}
    worker_rt.worker().drain()
    assert producer.task(task.task_id).status == TaskStatus.SUCCEEDED


def test_both_kinds_of_producer_send_the_same_call(
    producer: Runtime, worker_rt: Runtime
) -> None:
    args = {"order_id": "o-2", "amount": 30}
    first = worker_rt.enqueue_action("execute_refund", args, idempotency_key="k-1")
    again = producer.enqueue_action("execute_refund", args, idempotency_key="k-1")
    assert again.task_id == first.task_id  # no IdempotencyConflict: the same arguments


def test_arguments_are_validated_against_the_recorded_schema(producer: Runtime) -> None:
    with pytest.raises(InvalidArguments, match="amount: -5 is less than or equal to the minimum"):
        producer.enqueue_action("execute_refund", {"order_id": "o-3", "amount": -5})
    with pytest.raises(InvalidArguments, match="order_id"):
        producer.enqueue_action("execute_refund", {"order_id": "no spaces!", "amount": 5})
    with pytest.raises(InvalidArguments, match="'order_id' is a required property"):
        producer.enqueue_action("execute_refund", {"amount": 5})
    assert producer.tasks() == []


def test_the_recorded_policy_applies_at_enqueue(producer: Runtime) -> None:
    task = producer.enqueue_action("execute_refund", {"order_id": "o-4", "amount": 500})
    assert task.status == TaskStatus.AWAITING_APPROVAL
    # The notification tool is known from the catalog: the approval is announced.
    notices = [t for t in producer.tasks() if t.tool == "request_approval"]
    assert len(notices) == 1
    producer.approve(task.approval_id or "", by="alice")
    assert producer.task(task.task_id).status == TaskStatus.QUEUED


def test_internal_and_unknown_tools_are_refused(producer: Runtime) -> None:
    with pytest.raises(ToolError, match="internal"):
        producer.enqueue_action("request_approval", {"approval_id": "a", "task_id": "t"})
    with pytest.raises(UnknownTool, match="tool catalog does not list it"):
        producer.enqueue_action("no_such_tool", {})


def test_the_producer_shows_the_same_schemas(producer: Runtime, worker_rt: Runtime) -> None:
    assert producer.tool_schemas() == worker_rt.tool_schemas()


def test_a_worker_records_its_tools_when_it_starts(db: str, clock: FakeClock) -> None:
    shipment = {"order_id": "o", "address": "1 Way", "items": ["x"]}
    with Runtime(db, clock=clock) as producer, pytest.raises(UnknownTool):
        producer.enqueue_action("request_shipping", shipment)
    with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies", clock=clock) as rt:
        rt.worker().drain()
    with Runtime(db, clock=clock) as producer:
        task = producer.enqueue_action("request_shipping", shipment)
        assert task.status == TaskStatus.QUEUED


def test_a_policy_for_tools_nobody_recorded_says_how_to_record_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agentq init"):
        Runtime(f"sqlite:///{tmp_path / 'empty.db'}", policies=ROOT / "policies")


def test_agentq_init_records_and_a_producer_imports_no_tool_code(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'agentq.db'}"
    init = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "init", "--db", db,
         "--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    script = (
        "import json, sys\n"
        "from agentq import Runtime\n"
        f"rt = Runtime({db!r})\n"
        "small = rt.enqueue_action('execute_refund', {'order_id': 'o-5', 'amount': 20})\n"
        "large = rt.enqueue_action('execute_refund', {'order_id': 'o-6', 'amount': 200})\n"
        f"tools = {str(ROOT / 'tools')!r}\n"
        "loaded = sorted(m.__name__ for m in list(sys.modules.values())\n"
        "                if str(getattr(m, '__file__', None) or '').startswith(tools))\n"
        "print(json.dumps([small.status, large.status, loaded]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["queued", "awaiting_approval", []]
