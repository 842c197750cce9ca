"""The crash of issue 41 for the OpenAI Agents SDK, with real processes: the
agent is an ``agents.Agent`` (its ``OpenAIChatCompletionsModel`` over HTTP to
the scripted server on loopback, through ``turn_http_client``) declared with
``durable_agent`` in the tools folder every worker loads. An agent process
killed after its turn enqueued a refund, and the worker killed mid-charge,
restarted as users restart them, charge once and ask the model for that turn
once; a worker SIGKILLed while the model answers repeats only that request
(the scenarios of :mod:`tests.acceptance._crash`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq.testing import LoopbackAPI, ScriptedModel
from tests.acceptance._crash import (
    REFUND_TOOL,
    crash_an_agent_run,
    db,
    kill_worker_while_model_answers,
    project,
    script,
)
from tests.surfaces._extras import require

require("agents", "openai-agents")  # the workers' tools folder imports the SDK

pytestmark = pytest.mark.slow
__all__ = ["db"]  # the database fixture (SQLite, PostgreSQL)

TOOLS = REFUND_TOOL + '''

from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled
from openai import AsyncOpenAI

from agentq.adapters.openai_agents_durable import durable_agent, turn_http_client

set_tracing_disabled(True)

client = AsyncOpenAI(base_url=os.environ["REFUND_MODEL_URL"], api_key="sk-test",
                     http_client=turn_http_client())
refunds = durable_agent(
    Agent(name="refunds", instructions="You refund orders.",
          model=OpenAIChatCompletionsModel("scripted", openai_client=client)),
    tools=["execute_refund"],
)
'''


def test_an_sdk_agent_killed_after_its_turn_enqueued_a_refund_charges_once_when_restarted(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("REFUND_MODEL_URL", model.base_url)
        tools, policies = project(tmp_path, api, {"refunds": TOOLS})
        crash_an_agent_run(db, tmp_path, model, api, tools, policies)


def test_a_worker_killed_while_the_sdk_model_answers_repeats_only_that_request(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("REFUND_MODEL_URL", model.base_url)
        tools, policies = project(tmp_path, api, {"refunds": TOOLS})
        kill_worker_while_model_answers(db, model, api, tools, policies)
