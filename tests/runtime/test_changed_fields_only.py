"""On SQLite a worker writes only what a claim or a plain success changes: the
task's arguments are written once, by the enqueue, and never encoded again."""

from __future__ import annotations

from pathlib import Path

from agentq import FakeClock, Runtime, TaskStatus

_TOOL = """
from pydantic import BaseModel
from agentq import ToolContext, tool

class EchoArgs(BaseModel):
    text: str

class EchoResult(BaseModel):
    length: int

@tool(queue="echo")
def echo(ctx: ToolContext, args: EchoArgs) -> EchoResult:
    return EchoResult(length=len(args.text))
"""


def test_claim_and_completion_write_the_changed_fields_not_the_arguments(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "echo.py").write_text(_TOOL)
    rt = Runtime(f"sqlite:///{tmp_path}/t.db", tools=tools, clock=FakeClock())
    try:
        text = "MARKER-" + "x" * 2000
        tasks = rt.transact(
            lambda tx: [tx.enqueue("echo", {"text": f"{text}{i}"}) for i in range(3)]
        )
        statements: list[str] = []
        rt.backend._db._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        worker = rt.worker(queues=["echo"])
        assert worker.drain() == 3
        rt.backend._db._conn.set_trace_callback(None)  # type: ignore[attr-defined]
        writes = [s for s in statements if s.lstrip().upper().startswith(("UPDATE", "INSERT"))]
        assert writes, "the worker wrote nothing?"
        # What a write stores is before its WHERE (a claim's compare-and-swap compares
        # the stored text there, which is no write of it).
        assert not [s for s in writes if "MARKER" in s.split(" WHERE ")[0]], "args written again"
        for i, task in enumerate(tasks):
            done = rt.task(task.task_id)
            assert done.status == TaskStatus.SUCCEEDED
            assert done.result == {"length": len(text) + 1}
            assert done.deliveries == 1 and done.started_at is not None
            assert done.finished_at is not None and done.error is None
            assert done.args == {"text": f"{text}{i}"}
        assert worker.stats["succeeded"] == 3
    finally:
        rt.close()
