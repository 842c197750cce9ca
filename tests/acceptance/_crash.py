"""The crash-and-restart proof shared by the durable-run tests (agentq's own
agent, the OpenAI Agents SDK's, a LangGraph graph): the scripted model's
refund script, the project each test writes (its tools folder and the policy
that lets ``execute_refund`` reach the loopback payments API), and the two
scenarios with real processes:

* :func:`kill_mid_charge_and_restart`: the agent process is SIGKILLed after its
  step enqueued a refund, and the worker too while the charge is applied; both
  are started again as users start them (same conversation, same prompt);
* :func:`kill_worker_while_model_answers`: the worker is SIGKILLed while the
  model answers its turn 1; only that request is asked again.

Each test gives its framework's tools module; what it asserts afterwards (one
charge, each turn asked once) reads the scripted model and the payments API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentq import RunStatus, Runtime
from agentq.testing import LoopbackAPI, ModelRequest, Reply, ScriptedModel, WorkerProcess

__all__ = [
    "AGENT",
    "REFUND_TOOL",
    "agent_argv",
    "crash_an_agent_run",
    "db",
    "kill_mid_charge_and_restart",
    "kill_worker_while_model_answers",
    "project",
    "script",
    "wait_until",
]

#: The refund tool every test's tools folder declares (its module's first lines).
REFUND_TOOL = '''
import os

from pydantic import BaseModel

from agentq import ToolContext, tool
from agentq.http import checked


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="payments")
def execute_refund(ctx: ToolContext, args: Refund) -> dict:
    """Refund an order through the payments API (the task id is the idempotency key)."""
    url = ctx.settings["payments_url"] + "/refunds"
    response = checked(ctx.http.post(url, json=args.model_dump()), "payments")
    return response.json()
'''

#: The agent process a user runs for an agentq run: start (or find) the
#: conversation's run, wait for it to end.
AGENT = '''
import sys
from agentq import Runtime

rt = Runtime(sys.argv[1])
run = rt.start_run("refunds", "Refund order o1: 40.00", idempotency_key="conv-7")
print("run", run.run_id, flush=True)
print("status", rt.wait_run(run.run_id, 120, until="done").status, flush=True)
'''


def script(request: ModelRequest) -> Reply:
    """Turn 1 refunds order o1; turn 2 reports the refund's result."""
    if request.turn == 1:
        return Reply.tool_calls(("execute_refund", {"order_id": "o1", "amount": 40.0}))
    return Reply.text(f"Refunded: {request.last_tool_results()[0][1]}")


#: The lease of the tests' databases: a killed worker's task is redelivered
#: ``CRASH_LEASE`` seconds (and a 1 s backoff) after its last renewal, not 10 s:
#: what is proven (redelivered, charged once, each turn asked once) does not
#: depend on the length, and every process of a test (worker, agent, the test's
#: runtime) opens the same URL, so they lease alike. 3 s, not less: a busy
#: worker renews with 1.5 s left, room for a loaded machine's pauses.
CRASH_LEASE = 3


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database of the test: a SQLite file, or a fresh PostgreSQL database,
    both with :data:`CRASH_LEASE` second leases."""
    if request.param == "postgresql":
        url = str(request.getfixturevalue("postgres_url"))
    else:
        url = f"sqlite:///{tmp_path / 'runs.db'}"
    return url + ("&" if "?" in url else "?") + f"lease_seconds={CRASH_LEASE}"


def project(tmp_path: Path, api: LoopbackAPI, modules: dict[str, str]) -> tuple[Path, Path]:
    """A tools folder of ``modules`` (name -> source) and the policies folder."""
    tools, policies = tmp_path / "tools", tmp_path / "policies"
    tools.mkdir()
    policies.mkdir()
    for name, source in modules.items():
        (tools / f"{name}.py").write_text(textwrap.dedent(source))
    host = api.url.split("//", 1)[1]
    (policies / "defaults.toml").write_text(
        f'[tools.execute_refund]\nallowed_hosts = ["{host}"]\n'
    )
    return tools, policies


def wait_until(condition: Callable[[], object], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def kill_mid_charge_and_restart(
    db: str,
    tmp_path: Path,
    api: LoopbackAPI,
    tools: Path,
    policies: Path,
    agent: list[str],
    *,
    killed: Callable[[], None] = lambda: None,
) -> str:
    """Start the agent process (``agent``: its argv) and a worker; once the
    worker applies order o1's refund (its answer held back), SIGKILL both;
    ``killed()`` checks what the database holds then. Start a worker and the
    agent process again, as a user does, and return that process's output."""
    settings = {"payments_url": api.url}
    stall_received, stall_release = api.stall_after_applying("o1")
    first = subprocess.Popen(agent, stdout=subprocess.DEVNULL)
    try:
        with WorkerProcess(db, tools=tools, policies=policies, settings=settings) as worker:
            # The step committed and its refund is being applied: the agent
            # process dies (a deploy), and the worker too, mid-charge.
            assert stall_received.wait(90), worker.log()
            first.kill()
            worker.kill()
            stall_release.set()
        first.wait(30)
        killed()
        # Restarted as a user restarts it: same conversation, same prompt.
        with WorkerProcess(db, tools=tools, policies=policies, settings=settings) as worker:
            again = subprocess.run(agent, text=True, capture_output=True, timeout=180)
            assert again.returncode == 0, (again.stderr, worker.log())
        return again.stdout
    finally:
        first.kill()


def kill_worker_while_model_answers(
    db: str, model: ScriptedModel, api: LoopbackAPI, tools: Path, policies: Path
) -> None:
    """Run agent ``refunds`` of ``tools`` with a worker SIGKILLed while the model
    answers its first request, then another worker: the run succeeds, turn 1 is
    asked twice (the request in flight, its redo), turn 2 once, one charge."""
    settings = {"payments_url": api.url}
    workers: list[WorkerProcess] = []

    def kill_on_first_answer(request: ModelRequest, *_: object) -> None:
        if request.turn == 1 and len(model.requests()) <= 1 and workers:
            pid = workers[0].pid
            if pid is not None:
                os.kill(pid, signal.SIGKILL)

    model.hook(kill_on_first_answer)
    rt = Runtime(db, tools=tools, policies=policies)
    try:
        run = rt.start_run("refunds", "Refund order o1: 40.00", idempotency_key="conv-8")
        with WorkerProcess(db, tools=tools, policies=policies, settings=settings) as first:
            workers.append(first)
            wait_until(lambda: not first.alive, "the first worker's death")
        with WorkerProcess(db, tools=tools, policies=policies, settings=settings) as second:
            done = rt.wait_run(run.run_id, 120, until="done")
            assert done.status is RunStatus.SUCCEEDED, (done.error, second.log())
    finally:
        rt.close()
    asked = model.attempts_per_turn()
    assert asked[(run.run_id, 1)] == 2  # the request in flight at the kill, and its redo
    assert asked[(run.run_id, 2)] == 1  # a committed turn is never asked again
    assert sum(api.charges_per_key().values()) == 1


def crash_an_agent_run(
    db: str, tmp_path: Path, model: ScriptedModel, api: LoopbackAPI, tools: Path, policies: Path
) -> None:
    """:func:`kill_mid_charge_and_restart` for agent ``refunds`` of ``tools``, its
    agent process :data:`AGENT`: the restarted process finds the same run, which
    succeeds with one charge and each turn asked of the model once."""
    with Runtime(db, tools=tools, policies=policies) as init:
        init.record_tools()  # as `agentq init` does: the agent process has no tools' code
    rt = Runtime(db)

    def killed() -> None:
        (run,) = rt.runs()
        assert run.status is RunStatus.AWAITING_TOOLS, run

    try:
        out = kill_mid_charge_and_restart(
            db, tmp_path, api, tools, policies, agent_argv(tmp_path, AGENT, db), killed=killed
        )
        (run,) = rt.runs()
        done = rt.run(run.run_id)
    finally:
        rt.close()
    assert f"run {run.run_id}" in out and "status succeeded" in out
    assert done.status is RunStatus.SUCCEEDED, done.error
    assert model.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
    (call,) = done.turns[0].calls
    assert api.charges_per_key() == {call.task_id: 1} and len(api.applied()) == 1


def agent_argv(tmp_path: Path, source: str, *args: str) -> list[str]:
    """The argv of a user's agent process running ``source``."""
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(source))
    return [sys.executable, str(path), *args]

