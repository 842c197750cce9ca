"""A LangGraph graph checkpointed in agentq's database, its refund node's task
committed with the node's step, its wait for a human holding no process.

``AgentQSaver`` is the graph's checkpointer. The ``refund`` node stages the
refund as an agentq task (``saver.step(config).enqueue``) and waits for it
(``step.wait``): the task, the continuation that will resume the graph, and
LangGraph's record of the node's interrupt commit in one transaction.

With real processes: the first starter is SIGKILLed inside the refund node,
after it staged the refund and before the step committed: nothing of the step
exists, no refund. The user starts it again (the same script, the same thread):
the graph carries on from its last checkpoint (``decide`` is not asked again),
the node runs again and commits its refund (above 100: it awaits a human), and
the process ends. Started a third time, the graph is found waiting: no node
runs, no model is asked. A human approves in agentq; a worker charges the
refund once and resumes the graph (LangGraph runs the resumed node from its
top: its enqueue finds the task it committed, by its key), which reports it.
"""

# expect: killed inside the refund node: graph stopped before refund; refunds enqueued: 0
# expect: restarted: graph waiting at refund; refund awaiting_approval
# expect: restarted again: still waiting at refund; no node ran
# expect: approved by ops-lead; graph resumed by a worker: Refunded 250.0 for order C3.
# expect: model asked: 1; refund node runs: 3; refunds charged: 1

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agentq import Runtime
from agentq.adapters.langgraph_checkpoint import AgentQSaver
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]
THREAD: Any = {"configurable": {"thread_id": "ticket-c3"}}
RESUME_TOOL = "resume_refund_graph"


class Ticket(TypedDict, total=False):
    request: str
    order_id: str
    amount: float
    outcomes: list[dict[str, Any]]
    answer: str


def note(tmp: Path, what: str) -> None:
    """Count what ran, across processes (a file beside the database)."""
    with (tmp / "ran.txt").open("a") as f:
        f.write(what + "\n")


def build(saver: AgentQSaver, tmp: Path) -> Any:
    def decide(state: Ticket) -> Ticket:
        note(tmp, "model")  # a model would be asked here: once per committed step
        return {"order_id": "C3", "amount": 250.0}

    def refund(state: Ticket, config: RunnableConfig) -> Ticket:
        note(tmp, "refund")
        step = saver.step(config)
        step.enqueue("execute_refund", {"order_id": state["order_id"], "amount": state["amount"]})
        if os.environ.get("CRASH_IN_NODE"):
            os.kill(os.getpid(), signal.SIGKILL)  # staged, not committed
        return {"outcomes": step.wait(RESUME_TOOL)}

    def report(state: Ticket) -> Ticket:
        note(tmp, "report")
        result = state["outcomes"][0]["result"]
        return {"answer": f"Refunded {result['amount']} for order {state['order_id']}."}

    builder = StateGraph(Ticket)
    builder.add_node("decide", decide)
    builder.add_node("refund", refund)
    builder.add_node("report", report)
    builder.add_edge(START, "decide")
    builder.add_edge("decide", "refund")
    builder.add_edge("refund", "report")
    builder.add_edge("report", END)
    graph = builder.compile(checkpointer=saver)
    saver.serve(graph, RESUME_TOOL)  # the tool whose tasks resume it, in a worker
    return graph


def open_runtime(db: str, api_url: str) -> Runtime:
    settings = {"payments_url": api_url, "notifications_url": api_url}
    return Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies", settings=settings)


def starter(db: str, api_url: str, tmp: Path) -> None:
    """What the user runs: start the ticket's graph, or carry on where it stopped."""
    with open_runtime(db, api_url) as rt:
        saver = AgentQSaver(rt)
        # Start it if it has no checkpoint; else carry it on from its last one,
        # unless it waits for its tasks, ended, or a worker carries it on.
        saver.start_or_carry_on(build(saver, tmp), THREAD, {"request": "refund order C3"})


def run_starter(db: str, api_url: str, tmp: Path, *, crash: bool = False) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)} | ({"CRASH_IN_NODE": "1"} if crash else {})
    argv = [sys.executable, __file__, "starter", db, api_url, str(tmp)]
    return subprocess.run(argv, env=env, check=False).returncode


def main() -> None:
    with tempfile.TemporaryDirectory() as d, LoopbackAPI() as api:
        tmp = Path(d)
        db = os.environ.get("AGENTQ_DB") or f"sqlite:///{tmp / 'agentq.db'}"
        ran = tmp / "ran.txt"
        assert run_starter(db, api.url, tmp, crash=True) == -signal.SIGKILL
        with open_runtime(db, api.url) as rt:
            graph = build(AgentQSaver(rt), tmp)
            refunds = [t for t in rt.tasks() if t.tool == "execute_refund"]
            stopped = ",".join(graph.get_state(THREAD).next)
            print(f"killed inside the refund node: graph stopped before {stopped}; "
                  f"refunds enqueued: {len(refunds)}")  # fmt: skip

        assert run_starter(db, api.url, tmp) == 0
        with open_runtime(db, api.url) as rt:
            graph = build(AgentQSaver(rt), tmp)
            (refund,) = [t for t in rt.tasks() if t.tool == "execute_refund"]
            print(f"restarted: graph waiting at {','.join(graph.get_state(THREAD).next)}; "
                  f"refund {refund.status.value}")  # fmt: skip

        before = ran.read_text()
        assert run_starter(db, api.url, tmp) == 0
        with open_runtime(db, api.url) as rt:
            graph = build(AgentQSaver(rt), tmp)
            same = ran.read_text() == before
            print(f"restarted again: still waiting at {','.join(graph.get_state(THREAD).next)}; "
                  f"{'no node ran' if same else 'a node ran again'}")  # fmt: skip

            (approval,) = rt.approvals("pending")
            rt.approve(approval.approval_id, by="ops-lead")  # the human decides in agentq
            rt.worker().drain()  # normally `agentq worker`: the refund, then the resume
            answer = graph.get_state(THREAD).values["answer"]
            print(f"approved by {rt.approval(approval.approval_id).decided_by}; "
                  f"graph resumed by a worker: {answer}")  # fmt: skip
        lines = ran.read_text().split()
        print(f"model asked: {lines.count('model')}; refund node runs: {lines.count('refund')}; "
              f"refunds charged: {len(api.applied())}")  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["starter"]:
        starter(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
    else:
        main()
