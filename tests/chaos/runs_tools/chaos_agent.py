"""The chaos run's durable agent (``--runs``): a tools folder of its own, loaded
by every worker beside the refund bot's tools, as a user's tools folder defines
an agent. Its model is the scripted OpenAI-compatible server on loopback, whose
URL the run puts in ``AGENTQ_CHAOS_MODEL_URL`` (as the crash acceptance test
does). It may call the refund bot's ``execute_refund``; the policy sends refunds
above 100 to a human."""

from __future__ import annotations

import os

from agentq import Agent, OpenAICompatibleModel

MODEL_URL_VARIABLE = "AGENTQ_CHAOS_MODEL_URL"

chaos_runs = Agent(
    "chaos_runs",
    OpenAICompatibleModel(os.environ[MODEL_URL_VARIABLE], "scripted"),
    instructions="You refund orders, one turn at a time.",
    tools=["execute_refund"],
    max_turns=10,
    # Kills strand a turn until its lease expires and scripted 500s retry it:
    # attempts are not what the run exercises, so they do not end it.
    max_attempts=30,
    timeout=30.0,
)
