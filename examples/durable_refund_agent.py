"""The refund approval of the queue documents, as a durable LLM agent.

A customer asks an agent for a 250.00 refund. The model's turn calls
``execute_refund``; the policy gates refunds above 100, so the turn commits the
model's answer, the gated task, its approval request and the 72 h escalation
timer in one transaction, and the run waits: one row, no process. The agent's
process is SIGKILLed while it waits (a deploy). A human approves from here, a
process of its own: that transaction deletes the escalation and sends the
refund; a worker charges it once and asks the model for the next turn. The
agent's process, restarted as users restart it (same conversation key, same
prompt), finds the finished run and asks the model nothing.

The model is agentq's scripted OpenAI-compatible server on loopback (fresh
call ids on every request, as real providers); the payments API is the
loopback stand-in that counts charges per idempotency key.
"""

# expect: turn 1 committed: run awaiting_approval, refund awaiting_approval, timer in 72h
# expect: agent process killed while the run waits: exit -9
# expect: approved by bob: escalation deleted, refund queued
# expect: restarted agent process: same run, succeeded: Refunded 250.00 for order 1042.
# expect: model requests per turn: [1, 1]
# expect: refunds charged: 1

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from agentq import RunStatus, Runtime
from agentq.testing import LoopbackAPI, ModelRequest, Reply, ScriptedModel, WorkerProcess

TOOLS = '''
import os

from pydantic import BaseModel

from agentq import Agent, OpenAICompatibleModel, ToolContext, tool
from agentq.http import checked


class Refund(BaseModel):
    order_id: str
    amount: float


@tool(queue="payments")
def execute_refund(ctx: ToolContext, args: Refund) -> dict:
    """Refund an order through the payments API (the task id is the idempotency key)."""
    response = ctx.http.post(ctx.settings["payments_url"] + "/refunds", json=args.model_dump())
    return checked(response, "payments").json()


refund_agent = Agent(
    "refund_agent",
    OpenAICompatibleModel(os.environ["REFUND_MODEL_URL"], "scripted"),
    instructions="You handle refund requests with the execute_refund tool.",
    tools=["execute_refund"],
)
'''

POLICY = '''
[[approvals]]
name = "large-refunds"
tool = "execute_refund"
field = "amount"
above = 100
escalate_after = "72h"

[tools.execute_refund]
allowed_hosts = ["{host}"]
'''

#: The agent process a user runs: start (or find) the conversation's run, wait.
AGENT = '''
import sys
from agentq import Runtime

rt = Runtime(sys.argv[1])
run = rt.start_run("refund_agent", "Please refund 250.00 for order 1042.",
                   idempotency_key="conversation-1042", by="support-bot")
done = rt.wait_run(run.run_id, 600, until="done")
print(done.run_id, done.status, done.output, flush=True)
'''


def model_script(request: ModelRequest) -> Reply:
    if request.turn == 1:
        return Reply.tool_calls(("execute_refund", {"order_id": "1042", "amount": 250.0}))
    return Reply.text("Refunded 250.00 for order 1042.")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, ScriptedModel(model_script) as model, \
            LoopbackAPI() as payments:  # fmt: skip
        os.environ["REFUND_MODEL_URL"] = model.base_url
        folder = Path(tmp)
        (folder / "tools").mkdir()
        (folder / "tools" / "refunds.py").write_text(TOOLS)
        (folder / "policies").mkdir()
        host = payments.url.split("//", 1)[1]
        (folder / "policies" / "refunds.toml").write_text(POLICY.format(host=host))
        (folder / "agent.py").write_text(textwrap.dedent(AGENT))
        db = os.environ.get("AGENTQ_DB") or f"sqlite:///{folder / 'agentq.db'}"
        project = {"tools": folder / "tools", "policies": folder / "policies"}
        with Runtime(db, **project) as rt:  # type: ignore[arg-type]
            rt.record_tools()  # `agentq init`: the agent process runs without the tools' code
            agent = subprocess.Popen([sys.executable, str(folder / "agent.py"), db],
                                     stdout=subprocess.DEVNULL)  # fmt: skip
            with WorkerProcess(db, settings={"payments_url": payments.url}, **project):
                # The same conversation key finds the agent process's run (or
                # starts it, if this process comes first: one run either way).
                run = rt.start_run("refund_agent", "Please refund 250.00 for order 1042.",
                                   idempotency_key="conversation-1042", by="support-bot")
                parked = rt.wait_run(run.run_id, 120, until="idle")
                assert parked.status is RunStatus.AWAITING_APPROVAL, parked
                (call,) = rt.run(run.run_id).turns[0].calls
                (approval,) = rt.approvals("pending")
                timer = rt.task(str(approval.escalation_task_id))
                hours = round((timer.next_attempt_at - timer.created_at).total_seconds() / 3600)
                print(f"turn 1 committed: run {rt.run(run.run_id).status}, refund "
                      f"{rt.task(str(call.task_id)).status}, timer in {hours}h")
            agent.send_signal(signal.SIGKILL)
            print(f"agent process killed while the run waits: exit {agent.wait()}")
            rt.approve(approval.approval_id, by="bob", note="customer verified")
            print(f"approved by bob: escalation {_gone(rt, timer.task_id)}, refund "
                  f"{rt.task(str(call.task_id)).status}")
            with WorkerProcess(db, settings={"payments_url": payments.url}, **project):
                again = subprocess.run([sys.executable, str(folder / "agent.py"), db],
                                       capture_output=True, text=True, timeout=300)  # fmt: skip
            run_id, status, output = again.stdout.strip().split(" ", 2)
            same = "same run" if run_id == run.run_id else "ANOTHER run"
            print(f"restarted agent process: {same}, {status}: {output}")
            asked = model.requests_per_turn()
            print(f"model requests per turn: {[asked[(run.run_id, n)] for n in (1, 2)]}")
            print(f"refunds charged: {sum(payments.charges_per_key().values())}")


def _gone(rt: Runtime, task_id: str) -> str:
    return "deleted" if rt.task(task_id).status == "cancelled" else rt.task(task_id).status


if __name__ == "__main__":
    main()
