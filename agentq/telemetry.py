"""OpenTelemetry spans and metrics.

Spans: ``agentq.enqueue`` when a decision enqueues a task and ``agentq.execute``
when a worker runs it, linked through the W3C trace context carried in the task
envelope. Metrics are named after Spanner's queue metrics (send, ack, lease
expiration) plus task outcomes and duration. agentq only uses the global
providers the application installs; with none installed, all of this is a no-op.

A span that ends in an exception gets an ``exception`` event and an error status
whose message and stack trace are redacted (:mod:`agentq.redact`): OpenTelemetry's
own recording would export the raw message, URL credentials included.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from agentq.redact import describe_exception, redact_text

__all__ = ["Telemetry"]


_PROVIDERS: tuple[float, bool, bool] = (-1.0, False, False)


def _providers() -> tuple[bool, bool]:
    """(tracing, metering) installed, re-checked at most every second: looking the
    providers up reads environment variables, too slow for every task."""
    global _PROVIDERS
    now = time.monotonic()
    checked, tracing, metering = _PROVIDERS
    if now - checked > 1.0 or checked < 0:
        tracing = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        metering = type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
        _PROVIDERS = (now, tracing, metering)
    return tracing, metering


def _record_failure(span: Span, exc: BaseException) -> None:
    """What ``record_exception`` and ``set_status_on_exception`` would record,
    redacted."""
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    span.add_event(
        "exception",
        {
            "exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "exception.message": redact_text(str(exc)),
            "exception.stacktrace": redact_text(stack),
        },
    )
    span.set_status(Status(StatusCode.ERROR, describe_exception(exc)))


@contextmanager
def _redacted_failures(span: Span) -> Iterator[Span]:
    try:
        yield span
    except BaseException as exc:
        _record_failure(span, exc)
        raise


#: What :meth:`Telemetry.execute_span` is without a tracer provider (stateless:
#: shared by every thread).
_NO_SPAN: AbstractContextManager[Span] = nullcontext(trace.INVALID_SPAN)


class _Gated:
    """An instrument that does nothing until the application installs a meter
    provider (a no-op instrument still costs microseconds per task)."""

    def __init__(self, instrument: Any) -> None:
        self._instrument = instrument

    def add(self, amount: float, attributes: Mapping[str, str] | None = None) -> None:
        if Telemetry.metering():
            self._instrument.add(amount, attributes)

    def record(self, amount: float, attributes: Mapping[str, str] | None = None) -> None:
        if Telemetry.metering():
            self._instrument.record(amount, attributes)


class Telemetry:
    """agentq's tracer and instruments."""

    def __init__(self) -> None:
        self.tracer = trace.get_tracer("agentq")
        meter = metrics.get_meter("agentq")
        self.sent = _Gated(
            meter.create_counter("agentq.queue.message_send_count", description="messages sent")
        )
        self.acked = _Gated(
            meter.create_counter(
                "agentq.queue.message_ack_count", description="messages acknowledged"
            )
        )
        self.outcomes = _Gated(
            meter.create_counter("agentq.task.outcomes", description="task executions by outcome")
        )
        self.stale = _Gated(
            meter.create_counter(
                "agentq.task.stale_completions",
                description="completions refused because another delivery already acked",
            )
        )
        self.heartbeat_timeouts = _Gated(
            meter.create_counter(
                "agentq.worker.heartbeat_timeouts",
                description="workers reported lost: their heartbeat message came due",
            )
        )
        self.duration = _Gated(
            meter.create_histogram("agentq.task.duration", unit="s", description="handler run time")
        )

    @staticmethod
    def metering() -> bool:
        """Whether the application installed a meter provider (else skip instruments)."""
        return _providers()[1]

    @staticmethod
    def tracing() -> bool:
        """Whether the application installed a tracer provider (else spans are skipped:
        a no-op span still costs microseconds on every task)."""
        return _providers()[0]

    def enqueue_trace(self, tool: str, task_id: str) -> dict[str, str]:
        """Record the enqueue span and return the trace context to carry."""
        if not self.tracing():
            return {}
        with self.enqueue_span(tool, task_id):
            return self.inject()

    def inject(self) -> dict[str, str]:
        """The current trace context, to carry in an envelope."""
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier

    @contextmanager
    def enqueue_span(self, tool: str, task_id: str) -> Iterator[Span]:
        """Span around enqueuing one task."""
        with (
            self.tracer.start_as_current_span(
                f"agentq.enqueue {tool}",
                kind=SpanKind.PRODUCER,
                attributes={"agentq.tool": tool, "agentq.task_id": task_id},
                record_exception=False,
                set_status_on_exception=False,
            ) as span,
            _redacted_failures(span),
        ):
            yield span

    def execute_span(
        self, tool: str, task_id: str, attempt: int, carrier: Mapping[str, str]
    ) -> AbstractContextManager[Span]:
        """Span around one execution, linked to the enqueue span."""
        if not self.tracing():
            return _NO_SPAN  # no generator to start and close on every task
        return self._execute_span(tool, task_id, attempt, carrier)

    @contextmanager
    def _execute_span(
        self, tool: str, task_id: str, attempt: int, carrier: Mapping[str, str]
    ) -> Iterator[Span]:
        parent = trace.get_current_span(propagate.extract(dict(carrier))).get_span_context()
        links = [Link(parent)] if parent.is_valid else []
        with (
            self.tracer.start_as_current_span(
                f"agentq.execute {tool}",
                kind=SpanKind.CONSUMER,
                links=links,
                attributes={
                    "agentq.tool": tool,
                    "agentq.task_id": task_id,
                    "agentq.attempt": attempt,
                },
                record_exception=False,
                set_status_on_exception=False,
            ) as span,
            _redacted_failures(span),
        ):
            yield span
