"""The crash of issue 37, with real processes: an agent process killed after its
model turn enqueued a refund, restarted as users restart it (same conversation
key, same prompt), charges once and asks the model for that turn once; a worker
SIGKILLed while the model answers, or while the refund is applied, repeats only
the request in flight and never a committed turn or charge.

The model is the scripted OpenAI-compatible server on loopback (fresh call ids
on every request, as real providers mint them); the payments API is the
loopback stand-in that counts charges per idempotency key. The scenarios are
:mod:`tests.acceptance._crash`'s, shared with the frameworks' tests."""

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

pytestmark = pytest.mark.slow
__all__ = ["db"]  # the database fixture (SQLite, PostgreSQL)

TOOLS = REFUND_TOOL + '''

from agentq import Agent, OpenAICompatibleModel

refunds = Agent(
    "refunds",
    OpenAICompatibleModel(os.environ["REFUND_MODEL_URL"], "scripted"),
    instructions="You refund orders.",
    tools=["execute_refund"],
)
'''


def test_an_agent_killed_after_its_turn_enqueued_a_refund_charges_once_when_restarted(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("REFUND_MODEL_URL", model.base_url)
        tools, policies = project(tmp_path, api, {"refunds": TOOLS})
        crash_an_agent_run(db, tmp_path, model, api, tools, policies)


def test_a_worker_killed_while_the_model_answers_repeats_only_that_request(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("REFUND_MODEL_URL", model.base_url)
        tools, policies = project(tmp_path, api, {"refunds": TOOLS})
        kill_worker_while_model_answers(db, model, api, tools, policies)
