"""A task's page shows the trace id of its enqueue span once the application
installed a tracer provider. In a subprocess: OpenTelemetry's global provider
can be set once per process."""

from __future__ import annotations

import subprocess
import sys

from tests.console._need import need_ui

need_ui()

SCRIPT = r"""
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from starlette.testclient import TestClient
from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.console import Console, create_app
from agentq.server.auth import Principal, Scope, TokenAuth

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

class A(BaseModel):
    x: int

@tool(queue="q")
def t(ctx: ToolContext, args: A) -> None:
    return None

rt = Runtime("sqlite:///:memory:", tools=[t], clock=FakeClock())
task = rt.enqueue_action("t", {"x": 1})
[span] = [s for s in exporter.get_finished_spans() if s.name == "agentq.enqueue t"]
trace_id = format(span.context.trace_id, "032x")
token = "trace-token-0123456789abcdef"
auth = TokenAuth.from_tokens({token: Principal("ops", frozenset({Scope.OPERATE}))})
with TestClient(create_app(Console(rt, auth=auth))) as client:
    bearer = {"Authorization": f"Bearer {token}"}
    page = client.get(f"/console/tasks/{task.task_id}", headers=bearer)
assert page.status_code == 200, page.status_code
assert f'id="trace-id">{trace_id}<' in page.text, trace_id
print("ok", trace_id)
"""


def test_the_task_page_shows_the_trace_id_of_its_enqueue_span() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")
