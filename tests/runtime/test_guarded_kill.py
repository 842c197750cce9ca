"""Guarded calls against a real worker process killed with SIGKILL mid-handler
(issue 13, items 4 and 16): the process charges a payments API that ignores
Idempotency-Key, then hangs; the test kills it and, on the same SQLite file, runs
the redelivery in-process with a fake clock set past the lease (or the
at-most-once horizon). The charge is made once, whatever follows."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentq import FakeClock, Runtime, TaskStatus
from agentq.executor.guarded import horizon
from agentq.naive_payments import NaivePaymentsAPI
from agentq.testing import WorkerProcess

TOOLS = """
import time

from pydantic import BaseModel

from agentq import ToolContext, tool


class Charge(BaseModel):
    amount: int


def _lookup(ctx: ToolContext, args: Charge) -> dict | None:
    url = f"{ctx.settings['payments_url']}/charges"
    found = ctx.http.get(url, params={"reference": ctx.task_id}).json()["charges"]
    return {"charge_id": found[0]["charge_id"]} if found else None


def _charge_then_hang(ctx: ToolContext, args: Charge) -> dict:
    answer = ctx.http.post(
        f"{ctx.settings['payments_url']}/charges",
        json={"reference": ctx.task_id, "amount": args.amount},
    )
    time.sleep(300)  # the test kills the process here, after the charge
    return {"charge_id": answer.json()["charge_id"]}


@tool(queue="pay", idempotent=False, reconcile=_lookup)
def charge(ctx: ToolContext, args: Charge) -> dict:
    return _charge_then_hang(ctx, args)


@tool(queue="pay", idempotent=False)
def charge_bare(ctx: ToolContext, args: Charge) -> dict:
    return _charge_then_hang(ctx, args)


@tool(queue="long", at_most_once=True, timeout=600)
def render(ctx: ToolContext, args: Charge) -> dict:
    return _charge_then_hang(ctx, args)
"""

POLICIES = """
[tools.charge]
allowed_hosts = ["127.0.0.1"]
[tools.charge_bare]
allowed_hosts = ["127.0.0.1"]
[tools.render]
allowed_hosts = ["127.0.0.1"]
"""


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    tools, policies = tmp_path / "tools", tmp_path / "policies"
    tools.mkdir()
    policies.mkdir()
    (tools / "payments.py").write_text(textwrap.dedent(TOOLS))
    (policies / "payments.toml").write_text(POLICIES)
    return tools, policies


@pytest.fixture
def api() -> Iterator[NaivePaymentsAPI]:
    with NaivePaymentsAPI() as server:
        yield server


def _kill_after_the_charge(
    db: str, project: tuple[Path, Path], api: NaivePaymentsAPI, task_id: str
) -> None:
    tools, policies = project
    worker = WorkerProcess(db, tools=tools, policies=policies,
                           settings={"payments_url": api.url})  # fmt: skip
    with worker:
        deadline = time.monotonic() + 90
        while not api.charges_for(task_id):
            assert worker.alive, worker.log()
            assert time.monotonic() < deadline, f"no charge within 90 s:\n{worker.log()}"
            time.sleep(0.05)  # waiting for another process: no clock to advance
        worker.kill()  # SIGKILL mid-handler: after the charge, before any commit


def _runtime(db: str, project: tuple[Path, Path], api: NaivePaymentsAPI) -> Runtime:
    tools, policies = project
    # The worker processes killed here run on the real clock: this runtime starts there.
    return Runtime(db, tools=tools, policies=policies, settings={"payments_url": api.url},
                   clock=FakeClock(datetime.now(UTC)))  # fmt: skip


def _run_at(rt: Runtime, when: datetime) -> None:
    clock: FakeClock = rt.clock  # type: ignore[assignment]
    clock.set(when)
    rt.worker(receive_timeout=0.05).drain()


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("charge", TaskStatus.SUCCEEDED), ("charge_bare", TaskStatus.OUTCOME_UNKNOWN)],
)
def test_a_killed_non_idempotent_call_is_reconciled_or_parked_never_repeated(
    tmp_path: Path, project: tuple[Path, Path], api: NaivePaymentsAPI, tool: str,
    expected: TaskStatus,
) -> None:  # fmt: skip
    db = f"sqlite:///{tmp_path / 'agentq.db'}"
    rt = _runtime(db, project, api)
    try:
        task = rt.enqueue_action(tool, {"amount": 5})
        _kill_after_the_charge(db, project, api, task.task_id)
        started = rt.backend.get_record("tasks", task.task_id)
        assert started is not None and started["unsettled_call"] is True  # durable
        _run_at(rt, datetime.now(UTC) + timedelta(seconds=60))  # past the lease
        after = rt.task(task.task_id)
        assert after.status is expected
        [charge] = api.charges_for(task.task_id)  # charged once
        if expected is TaskStatus.SUCCEEDED:
            assert after.result == {"charge_id": charge["charge_id"]}
    finally:
        rt.close()


def test_a_killed_at_most_once_run_is_not_repeated_before_its_horizon(
    tmp_path: Path, project: tuple[Path, Path], api: NaivePaymentsAPI
) -> None:
    db = f"sqlite:///{tmp_path / 'agentq.db'}"
    rt = _runtime(db, project, api)
    try:
        task = rt.enqueue_action("render", {"amount": 1})
        _kill_after_the_charge(db, project, api, task.task_id)
        killed_at = datetime.now(UTC)
        _run_at(rt, killed_at + timedelta(seconds=120))  # leases long expired
        assert rt.task(task.task_id).status is TaskStatus.RUNNING
        assert rt.backend.stats("long").scheduled == 1  # held off until the horizon
        _run_at(rt, killed_at + horizon(600) + timedelta(seconds=5))
        assert rt.task(task.task_id).status is TaskStatus.OUTCOME_UNKNOWN
        assert len(api.charges_for(task.task_id)) == 1
    finally:
        rt.close()
