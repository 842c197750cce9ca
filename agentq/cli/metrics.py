"""``agentq worker --metrics-port``: a small health and metrics endpoint.

``GET /metrics`` answers Prometheus text through the OpenTelemetry Prometheus
exporter (agentq's own instruments, :mod:`agentq.telemetry`, plus the worker's
in-flight count and finished attempts); ``GET /healthz`` answers ``ok`` while
the worker serves. It listens on loopback unless ``--metrics-host`` says
otherwise. Both paths require ``Authorization: Bearer <token>`` with the token
from ``$AGENTQ_METRICS_TOKEN``; ``--metrics-insecure-local`` drops that, on a
loopback address only. Needs the ``metrics`` extra (``pip install
'agentq-runtime[metrics]'``).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentq.errors import ConfigError, MissingExtra

__all__ = ["TOKEN_ENV", "MetricsServer"]

TOKEN_ENV = "AGENTQ_METRICS_TOKEN"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MetricsServer:
    """Serves ``/metrics`` and ``/healthz`` for one worker in a daemon thread."""

    def __init__(
        self,
        host: str,
        port: int,
        worker: Any,
        healthy: Callable[[], bool],
        *,
        insecure_local: bool = False,
    ) -> None:
        token = os.environ.get(TOKEN_ENV) or None
        if insecure_local and not _loopback(host):
            raise ConfigError(
                f"--metrics-insecure-local is for loopback addresses only, not {host}: "
                f"set ${TOKEN_ENV} instead"
            )
        if token is None and not insecure_local:
            raise ConfigError(
                f"--metrics-port needs a token in ${TOKEN_ENV} (scrapers send "
                "Authorization: Bearer <token>), or --metrics-insecure-local on loopback"
            )
        if insecure_local:
            token = None
        try:
            from opentelemetry import metrics
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from opentelemetry.metrics import CallbackOptions, Observation
            from opentelemetry.sdk.metrics import MeterProvider
            from prometheus_client import CollectorRegistry, generate_latest
        except ImportError as exc:
            raise MissingExtra.needed_by(
                "--metrics-port (the OpenTelemetry Prometheus exporter)", "metrics", exc.name
            ) from exc
        registry = CollectorRegistry()
        self.provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
        metrics.set_meter_provider(self.provider)
        meter = metrics.get_meter("agentq.worker")

        def in_flight(_: CallbackOptions) -> Iterable[Observation]:
            with worker._lock:
                yield Observation(len(worker._inflight))

        def finished(_: CallbackOptions) -> Iterable[Observation]:
            yield Observation(worker.finished)

        meter.create_observable_gauge(
            "agentq.worker.in_flight",
            [in_flight],
            description="tasks leased by this worker, not finished",
        )
        meter.create_observable_counter("agentq.worker.finished", [finished],
                                        description="attempts this worker finished")  # fmt: skip

        def render() -> bytes:
            return bytes(generate_latest(registry))

        self._server = ThreadingHTTPServer((host, port), _handler(render, healthy, token))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="agentq-metrics", daemon=True
        )

    @property
    def url(self) -> str:
        """``http://host:port`` it listens on."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> MetricsServer:
        """Start serving in the background."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; bounded."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self.provider.shutdown(timeout_millis=2000)


def _handler(
    render: Callable[[], bytes], healthy: Callable[[], bool], token: str | None
) -> type[BaseHTTPRequestHandler]:
    expected = None if token is None else f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            given = self.headers.get("Authorization", "").encode()
            if expected is not None and not hmac.compare_digest(given, expected):
                self._reply(401, b"unauthorized\n", extra={"WWW-Authenticate": "Bearer"})
            elif self.path == "/metrics":
                self._reply(200, render(), "text/plain; version=0.0.4; charset=utf-8")
            elif self.path == "/healthz":
                ok = healthy()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"stopping\n")
            else:
                self._reply(404, b"not found: /metrics or /healthz\n")

        def _reply(self, status: int, body: bytes, kind: str = "text/plain",
                   extra: dict[str, str] | None = None) -> None:  # fmt: skip
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes are not worth a log line each

    return Handler
