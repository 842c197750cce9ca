"""The crash of issue 41 for the OpenAI Agents SDK, with real processes: the
agent is an ``agents.Agent`` (its ``OpenAIChatCompletionsModel`` over HTTP to
the scripted server on loopback, through ``turn_http_client``) declared with
``durable_agent`` in the tools folder every worker loads. An agent process
killed after its turn enqueued a refund, and the worker killed mid-charge,
restarted as users restart them, charge once and ask the model for that turn
once; a worker SIGKILLed while the model answers repeats only that request."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentq import RunStatus, Runtime
from agentq.testing import LoopbackAPI, ModelRequest, ScriptedModel, WorkerProcess
from tests.acceptance.test_durable_run_crash import AGENT, db, script, wait_until
from tests.surfaces._extras import require

require("agents", "openai-agents")  # the workers' tools folder imports the SDK

pytestmark = pytest.mark.slow
__all__ = ["db"]  # the database fixture (SQLite, PostgreSQL), shared with the core's test

TOOLS = '''
import os

from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic import BaseModel

from agentq import ToolContext, tool
from agentq.adapters.openai_agents_durable import durable_agent, turn_http_client
from agentq.http import checked

set_tracing_disabled(True)


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="payments")
def execute_refund(ctx: ToolContext, args: Refund) -> dict:
    """Refund an order through the payments API (the task id is the idempotency key)."""
    url = ctx.settings["payments_url"] + "/refunds"
    response = checked(ctx.http.post(url, json=args.model_dump()), "payments")
    return response.json()


client = AsyncOpenAI(base_url=os.environ["REFUND_MODEL_URL"], api_key="sk-test",
                     http_client=turn_http_client())
refunds = durable_agent(
    Agent(name="refunds", instructions="You refund orders.",
          model=OpenAIChatCompletionsModel("scripted", openai_client=client)),
    tools=["execute_refund"],
)
'''


def project(tmp_path: Path, api: LoopbackAPI) -> tuple[Path, Path]:
    tools, policies = tmp_path / "tools", tmp_path / "policies"
    tools.mkdir()
    policies.mkdir()
    (tools / "refunds.py").write_text(textwrap.dedent(TOOLS))
    host = api.url.split("//", 1)[1]
    (policies / "defaults.toml").write_text(
        f'[tools.execute_refund]\nallowed_hosts = ["{host}"]\n'
    )
    return tools, policies


def test_an_sdk_agent_killed_after_its_turn_enqueued_a_refund_charges_once_when_restarted(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent_script = tmp_path / "agent.py"
    agent_script.write_text(textwrap.dedent(AGENT))
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("REFUND_MODEL_URL", model.base_url)
        tools, policies = project(tmp_path, api)
        with Runtime(db, tools=tools, policies=policies) as init:
            init.record_tools()  # as `agentq init` does: the agent process has no tools' code
        stall_received, stall_release = api.stall_after_applying("o1")
        settings = {"payments_url": api.url}
        rt = Runtime(db)
        first = subprocess.Popen([sys.executable, str(agent_script), db],
                                 stdout=subprocess.DEVNULL)  # fmt: skip
        try:
            with WorkerProcess(db, tools=tools, policies=policies, settings=settings) as worker:
                # The turn committed and its refund is being applied: the agent
                # process dies (a deploy), and the worker too, mid-charge.
                assert stall_received.wait(90), worker.log()
                first.kill()
                worker.kill()
                stall_release.set()
            first.wait(30)
            (run,) = rt.runs()
            assert run.status is RunStatus.AWAITING_TOOLS, run
            with WorkerProcess(db, tools=tools, policies=policies, settings=settings) as worker:
                again = subprocess.run([sys.executable, str(agent_script), db], text=True,
                                       capture_output=True, timeout=180)  # fmt: skip
                assert again.returncode == 0, (again.stderr, worker.log())
            assert f"run {run.run_id}" in again.stdout and "status succeeded" in again.stdout
        finally:
            first.kill()
            rt.close()
        done = Runtime(db).run(run.run_id)
        assert done.status is RunStatus.SUCCEEDED, done.error
        assert model.requests_per_turn() == {(run.run_id, 1): 1, (run.run_id, 2): 1}
        (call,) = done.turns[0].calls
        assert api.charges_per_key() == {call.task_id: 1} and len(api.applied()) == 1


def test_a_worker_killed_while_the_sdk_model_answers_repeats_only_that_request(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("REFUND_MODEL_URL", model.base_url)
        tools, policies = project(tmp_path, api)
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
