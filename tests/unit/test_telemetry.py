"""Spans and metrics, once the application installs OpenTelemetry providers.

Runs in a subprocess: OpenTelemetry's global providers can be set once per process.
"""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from agentq import FakeClock, Runtime, ToolContext, tool

exporter = InMemorySpanExporter()
tp = TracerProvider(); tp.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(tp)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

class A(BaseModel):
    x: int

@tool(queue="q")
def t(ctx: ToolContext, args: A) -> None:
    return None

rt = Runtime("sqlite:///:memory:", tools=[t], clock=FakeClock())
task = rt.enqueue_action("t", {"x": 1})
rt.worker().drain()
spans = {s.name: s for s in exporter.get_finished_spans()}
enq, exe = spans["agentq.enqueue t"], spans["agentq.execute t"]
points = {}
for rm in reader.get_metrics_data().resource_metrics:
    for sm in rm.scope_metrics:
        for m in sm.metrics:
            pts = m.data.data_points
            points[m.name] = sum(getattr(p, "value", getattr(p, "count", 0)) for p in pts)
print(json.dumps({
    "linked": [l.context.span_id for l in exe.links] == [enq.context.span_id],
    "task_attr": exe.attributes["agentq.task_id"] == task.task_id,
    "metrics": points,
}))
"""


def test_spans_are_linked_and_metrics_counted() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["linked"] and out["task_attr"]
    m = out["metrics"]
    assert m["agentq.queue.message_send_count"] == 1
    assert m["agentq.queue.message_ack_count"] == 1
    assert m["agentq.task.outcomes"] == 1
    assert m["agentq.task.duration"] == 1


SECRET_SCRIPT = r"""
import json
import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.policies import Policy

exporter = InMemorySpanExporter()
tp = TracerProvider(); tp.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(tp)

class A(BaseModel):
    x: int

@tool(queue="q", max_attempts=1)
def t(ctx: ToolContext, args: A) -> None:
    ctx.http.get("http://u:pw-3e1f@127.0.0.1:9/p?api_key=key-77aa").raise_for_status()

policy = Policy.model_validate({"tools": {"t": {"allowed_hosts": ["127.0.0.1"]}}})
rt = Runtime("sqlite:///:memory:", tools=[t], policies=policy, clock=FakeClock(),
             http_transport=httpx.MockTransport(lambda r: httpx.Response(500)))
rt.enqueue_action("t", {"x": 1})
rt.worker().drain()
[span] = [s for s in exporter.get_finished_spans() if s.name == "agentq.execute t"]
print(json.dumps({
    "status": [span.status.status_code.name, span.status.description],
    "events": [[e.name, dict(e.attributes or {})] for e in span.events],
    "attributes": dict(span.attributes or {}),
}))
"""


def test_exception_events_of_spans_are_redacted() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SECRET_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "pw-3e1f" not in proc.stdout and "key-77aa" not in proc.stdout
    out = json.loads(proc.stdout)
    assert out["status"][0] == "ERROR"
    [(name, attrs)] = out["events"]
    assert name == "exception" and attrs["exception.type"].endswith("HTTPStatusError")
    assert "http://u:REDACTED@127.0.0.1:9/p?api_key=REDACTED" in attrs["exception.message"]
    assert "raise_for_status" in attrs["exception.stacktrace"]
