"""The crash of issue 41 for LangGraph, with real processes: the chaos run's
ReAct-style ``StateGraph`` (:mod:`tests.chaos.graph_tools.chaos_graph`: an
``agent`` node asking the scripted model over HTTP, a ``refunds`` node whose
refunds are agentq tasks staged with ``AgentQSaver.step`` and awaited with
``step.wait``) in the tools folder every worker loads, its continuation
declared with ``resume_waiting``. The user's
process starts the thread and waits for it; it is SIGKILLed after the refunds
node committed a refund, and the worker too while the refund is applied.
Started again as users start them (same thread id, same prompt), the refund is
charged once, and the model is asked once per committed step (turn 1 by the
user's process, turn 2 by the worker that resumes the graph). The scenario is
:func:`tests.acceptance._crash.kill_mid_charge_and_restart`, shared with the
durable-run tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentq import Runtime
from agentq.ledger import TaskStatus
from agentq.testing import LoopbackAPI, ScriptedModel
from tests.acceptance._crash import (
    REFUND_TOOL,
    agent_argv,
    db,
    kill_mid_charge_and_restart,
    project,
    script,
)
from tests.surfaces._extras import require

require("langgraph", "langchain")  # the workers' tools folder imports LangGraph

pytestmark = pytest.mark.slow
__all__ = ["db"]  # the database fixture (SQLite, PostgreSQL)

#: The graph, in the tools folder (``agentq worker --tools`` finds its resume):
#: the chaos run's, whose model URL is ``AGENTQ_CHAOS_MODEL_URL``.
GRAPH = Path(__file__).resolve().parents[1] / "chaos" / "graph_tools" / "chaos_graph.py"

#: The user's process: start the thread (or carry it on), wait until it ends.
STARTER = '''
import sys
import time

sys.path.insert(0, sys.argv[2])
from agentq import Runtime
from agentq.adapters.langgraph_checkpoint import AgentQSaver
from chaos_graph import build

THREAD = {"configurable": {"thread_id": "conv-7"}}
with Runtime(sys.argv[1], tools=sys.argv[2], policies=sys.argv[3]) as rt:
    saver = AgentQSaver(rt)
    graph = build(saver)
    # Start it, or carry it on, unless it waits, ended or a worker carries it on.
    saver.start_or_carry_on(graph, THREAD, {"messages": [
        {"role": "user", "content": "Refund order o1: 40.00"}]})
    deadline = time.monotonic() + 120
    while (state := graph.get_state(THREAD)).next or state.tasks:
        assert time.monotonic() < deadline
        time.sleep(0.05)  # a worker resumes it once its refund is done
    print("next", list(state.next), flush=True)
    print("answer", state.values["messages"][-1]["content"], flush=True)
'''


def test_a_graph_killed_after_its_node_enqueued_a_refund_charges_once_when_restarted(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedModel(script) as model, LoopbackAPI() as api:
        monkeypatch.setenv("AGENTQ_CHAOS_MODEL_URL", model.base_url)
        modules = {"refunds": REFUND_TOOL, "chaos_graph": GRAPH.read_text()}
        tools, policies = project(tmp_path, api, modules)
        rt = Runtime(db, tools=tools, policies=policies)

        def killed() -> None:  # the refund committed with the node's step; no answer yet
            (refund,) = [t for t in rt.tasks() if t.tool == "execute_refund"]
            assert refund.status is not TaskStatus.SUCCEEDED, refund

        try:
            out = kill_mid_charge_and_restart(
                db, tmp_path, api, tools, policies,
                agent_argv(tmp_path, STARTER, db, str(tools), str(policies)), killed=killed,
            )  # fmt: skip
            (refund,) = [t for t in rt.tasks() if t.tool == "execute_refund"]
        finally:
            rt.close()
        assert "next []" in out and "answer Refunded: " in out, out
        assert model.requests_per_turn() == {("conv-7", 1): 1, ("conv-7", 2): 1}
        assert api.charges_per_key() == {refund.task_id: 1} and len(api.applied()) == 1
