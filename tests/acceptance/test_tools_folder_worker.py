"""``agentq worker`` serves a tools folder whose tools import a helper module beside them."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from agentq import Runtime, TaskStatus
from agentq.testing import WorkerProcess

pytestmark = pytest.mark.slow


def test_worker_process_serves_tools_that_import_a_helper(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    policies = tmp_path / "policies"
    tools.mkdir()
    policies.mkdir()
    (policies / "defaults.toml").write_text("[defaults]\nmax_attempts = 1\n")
    (tools / "_common.py").write_text("def shout(text: str) -> str:\n    return text.upper()\n")
    (tools / "shouting.py").write_text(textwrap.dedent("""
        from pydantic import BaseModel

        from agentq import ToolContext, tool

        from ._common import shout


        class Words(BaseModel):
            text: str


        @tool(queue="loud")
        def louder(ctx: ToolContext, args: Words) -> dict:
            return {"text": shout(args.text)}
        """))  # fmt: skip
    db = f"sqlite:///{tmp_path / 'w.db'}"
    rt = Runtime(db, tools=tools, policies=policies)
    task = rt.enqueue_action("louder", {"text": "hello"})
    try:
        with WorkerProcess(db, tools=tools, policies=policies) as worker:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and worker.alive:
                if rt.task(task.task_id).done:
                    break
                time.sleep(0.05)
            done = rt.task(task.task_id)
            output = worker.log()
    finally:
        rt.close()
    assert done.status == TaskStatus.SUCCEEDED, (done.error, output)
    assert done.result == {"text": "HELLO"}
