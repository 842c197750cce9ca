"""The chaos run's OpenAI Agents SDK agent (``--frameworks openai-agents``): an
``agents.Agent`` whose ``OpenAIChatCompletionsModel`` asks the scripted model
on loopback through ``turn_http_client`` (so each request carries the turn's
headers and the worker's pid), declared with ``durable_agent`` in a tools
folder every worker loads. Its runs are driven and checked as the core agent's
(:mod:`tests.chaos.runs`, :mod:`tests.chaos.run_checks`)."""

from __future__ import annotations

import os

from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled
from openai import AsyncOpenAI

from agentq.adapters.openai_agents_durable import durable_agent, turn_http_client

set_tracing_disabled(True)

client = AsyncOpenAI(
    base_url=os.environ["AGENTQ_CHAOS_MODEL_URL"], api_key="sk-chaos",
    http_client=turn_http_client(), max_retries=0,
)  # fmt: skip
chaos_sdk_runs = durable_agent(
    Agent(name="chaos_sdk_runs", instructions="You refund orders, one turn at a time.",
          model=OpenAIChatCompletionsModel("scripted", openai_client=client)),
    tools=["execute_refund"],
    max_turns=10,
    # As the core chaos agent: kills and scripted 500s are not what ends a run.
    max_attempts=30,
    timeout=30.0,
)  # fmt: skip
