"""OpenTelemetry spans and metrics.

Spans: ``agentq.enqueue`` when a decision enqueues a task and ``agentq.execute``
when a worker runs it, linked through the W3C trace context carried in the task
envelope. Metrics are named after Spanner's queue metrics (send, ack, lease
expiration) plus task outcomes and duration. agentq only uses the global
providers the application installs; with none installed, all of this is a no-op.

A span that ends in an exception gets an ``exception`` event and an error status
whose message and stack trace are redacted (:mod:`agentq.redact`): OpenTelemetry's
own recording would export the raw message, URL credentials included.

OpenTelemetry itself is imported only once something else has imported it (an
application installing a provider has) or its provider environment variables
are set: a worker that exports nothing does not pay its import at start-up.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from agentq.redact import describe_exception, redact_text

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = ["Telemetry"]


_PROVIDERS: tuple[float, bool, bool] = (-1.0, False, False)


def _providers() -> tuple[bool, bool]:
    """(tracing, metering) installed, re-checked at most every second: looking the
    providers up reads environment variables, too slow for every task."""
    global _PROVIDERS
    now = time.monotonic()
    checked, tracing, metering = _PROVIDERS
    if now - checked > 1.0 or checked < 0:
        if _installable():
            from opentelemetry import metrics, trace

            tracing = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
            metering = type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
        else:
            tracing = metering = False
        _PROVIDERS = (now, tracing, metering)
    return tracing, metering


#: The variables naming a provider OpenTelemetry would load on its first look-up.
_PROVIDER_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def _installable() -> bool:
    """Whether a provider may be installed: only code that imported OpenTelemetry
    can have set one, or OpenTelemetry loads the one an environment variable names."""
    return "opentelemetry" in sys.modules or any(v in os.environ for v in _PROVIDER_VARIABLES)


def _record_failure(span: Span, exc: BaseException) -> None:
    """What ``record_exception`` and ``set_status_on_exception`` would record,
    redacted."""
    from opentelemetry.trace import Status, StatusCode

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
#: shared by every thread). Its value is None: no caller uses the span it yields
#: (OpenTelemetry's ``INVALID_SPAN`` would need OpenTelemetry imported).
_NO_SPAN: AbstractContextManager[Any] = nullcontext(None)


class _Gated:
    """An instrument that does nothing until the application installs a meter
    provider (a no-op instrument still costs microseconds per task); it is made
    on its first use with one."""

    def __init__(self, kind: str, name: str, **options: str) -> None:
        self._kind, self._name, self._options = kind, name, options
        self._instrument: Any = None

    def _made(self) -> Any:
        if self._instrument is None:  # a race makes two; both count in one meter
            from opentelemetry import metrics

            meter = metrics.get_meter("agentq")
            self._instrument = getattr(meter, self._kind)(self._name, **self._options)
        return self._instrument

    def add(self, amount: float, attributes: Mapping[str, str] | None = None) -> None:
        if Telemetry.metering():
            self._made().add(amount, attributes)

    def record(self, amount: float, attributes: Mapping[str, str] | None = None) -> None:
        if Telemetry.metering():
            self._made().record(amount, attributes)


class Telemetry:
    """agentq's tracer and instruments."""

    def __init__(self) -> None:
        self._tracer: Tracer | None = None
        counter = "create_counter"
        self.sent = _Gated(counter, "agentq.queue.message_send_count",
                           description="messages sent")  # fmt: skip
        self.acked = _Gated(counter, "agentq.queue.message_ack_count",
                            description="messages acknowledged")  # fmt: skip
        self.outcomes = _Gated(counter, "agentq.task.outcomes",
                               description="task executions by outcome")  # fmt: skip
        self.stale = _Gated(
            counter, "agentq.task.stale_completions",
            description="completions refused because another delivery already acked",
        )  # fmt: skip
        self.heartbeat_timeouts = _Gated(
            counter, "agentq.worker.heartbeat_timeouts",
            description="workers reported lost: their heartbeat message came due",
        )  # fmt: skip
        self.duration = _Gated("create_histogram", "agentq.task.duration", unit="s",
                               description="handler run time")  # fmt: skip

    @property
    def tracer(self) -> Tracer:
        """agentq's tracer (OpenTelemetry imported on first use)."""
        if self._tracer is None:
            from opentelemetry import trace

            self._tracer = trace.get_tracer("agentq")
        return self._tracer

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
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier

    @contextmanager
    def enqueue_span(self, tool: str, task_id: str) -> Iterator[Span]:
        """Span around enqueuing one task."""
        from opentelemetry.trace import SpanKind

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
    ) -> AbstractContextManager[Span | None]:
        """Span around one execution, linked to the enqueue span (None when no
        tracer provider is installed)."""
        if not self.tracing():
            return _NO_SPAN  # no generator to start and close on every task
        return self._execute_span(tool, task_id, attempt, carrier)

    @contextmanager
    def _execute_span(
        self, tool: str, task_id: str, attempt: int, carrier: Mapping[str, str]
    ) -> Iterator[Span]:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import Link, SpanKind

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
