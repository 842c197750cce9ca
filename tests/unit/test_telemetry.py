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
