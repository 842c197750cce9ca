"""``agentq worker --metrics-port``: a small health and metrics endpoint.

``GET /metrics`` answers Prometheus text through the OpenTelemetry Prometheus
exporter (agentq's own instruments, :mod:`agentq.telemetry`, plus the worker's
in-flight count and finished attempts); ``GET /healthz`` answers ``ok`` while
the worker serves. It listens on loopback unless ``--metrics-host`` says
otherwise. Both paths require ``Authorization: Bearer <token>`` with the token
from ``$AGENTQ_METRICS_TOKEN``; ``--metrics-insecure-local`` drops that, on a
loopback address only. Needs the ``metrics`` extra (``pip install
'agentq-runtime[metrics]'``).

It serves from a bounded pool (``[servers] metrics_threads``, issue 27 item 11:
a thread per connection made 200 idle sockets 200 threads). A connection waits
in a selector, without a thread, until its request's head is in (within
``header_timeout`` of connecting, else it is closed; at most
``max_connections`` wait at once); a pool thread then answers it and closes it
(HTTP/1.0: no idle keep-alive).
"""

from __future__ import annotations

import hmac
import io
import ipaddress
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from agentq.config import ServerLimits
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


_MAX_HEAD = 16 * 1024  # a request line and headers longer than this are refused
_TIMED_OUT = b"HTTP/1.0 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"


class PooledHTTPServer(HTTPServer):
    """An HTTP/1.0 server answering from ``limits.metrics_threads`` threads.

    Accepted connections wait in a selector of one thread (no thread each) until
    their request's head is in; the head is read there, without blocking, so a
    slow client never holds a pool thread. A connection whose head is not in
    ``limits.header_timeout`` seconds after it was accepted is closed, and beyond
    ``limits.max_connections`` waiting ones a new connection is closed at once.
    """

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        limits: ServerLimits,
    ) -> None:
        # The listen backlog: a burst of connections beyond it waits for the
        # client's SYN retransmission (a second or more), not for the server.
        self.request_queue_size = min(limits.max_connections, 1024)
        super().__init__(address, handler)
        self.limits = limits
        self._pool = ThreadPoolExecutor(limits.metrics_threads, thread_name_prefix="agentq-metrics")
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._arrived: list[tuple[socket.socket, Any]] = []
        self._waiting: dict[socket.socket, tuple[float, Any, bytearray]] = {}
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._heads = threading.Thread(target=self._read_heads, name="agentq-metrics-heads",
                                       daemon=True)  # fmt: skip
        self._heads.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand an accepted connection to the head reader (never blocks)."""
        with self._lock:
            if len(self._waiting) + len(self._arrived) >= self.limits.max_connections:
                self.shutdown_request(request)
                return
            self._arrived.append((request, client_address))
        self._poke()

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def _read_heads(self) -> None:
        while not self._closed:
            with self._lock:
                arrived, self._arrived = self._arrived, []
            now = time.monotonic()
            for sock, address in arrived:
                sock.setblocking(False)
                self._waiting[sock] = (now + self.limits.header_timeout, address, bytearray())
                self._selector.register(sock, selectors.EVENT_READ)
            first = min((d for d, _, _ in self._waiting.values()), default=now + 1.0)
            for key, _ in self._selector.select(max(first - now, 0.0)):
                if key.fileobj is self._wake_r:
                    self._wake_r.recv(4096)
                    continue
                assert isinstance(key.fileobj, socket.socket)
                self._more_of(key.fileobj)
            now = time.monotonic()
            for sock in [s for s, (d, _, _) in self._waiting.items() if d <= now]:
                self._drop(sock, _TIMED_OUT)

    def _more_of(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sock)
            return
        _, address, head = self._waiting[sock]
        head += data
        if b"\r\n\r\n" in head or b"\n\n" in head:
            self._selector.unregister(sock)
            del self._waiting[sock]
            self._pool.submit(self._answer, sock, address, bytes(head))
        elif len(head) > _MAX_HEAD:
            self._drop(sock)

    def _drop(self, sock: socket.socket, last_words: bytes = b"") -> None:
        self._selector.unregister(sock)
        del self._waiting[sock]
        if last_words:
            try:
                sock.send(last_words)
            except OSError:
                pass
        self.shutdown_request(sock)

    def _answer(self, sock: socket.socket, address: Any, head: bytes) -> None:
        try:
            sock.setblocking(True)
            sock.settimeout(self.limits.header_timeout)  # for writing the answer
            self.finish_request((sock, head), address)  # type: ignore[arg-type]
        except Exception:
            self.handle_error(sock, address)
        finally:
            self.shutdown_request(sock)

    def server_close(self) -> None:
        self._closed = True
        self._poke()
        self._heads.join(5)
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for sock in list(self._waiting):
            self.shutdown_request(sock)
        self._waiting.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


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
        limits: ServerLimits | None = None,
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

        limits = limits if limits is not None else ServerLimits()
        self._server = PooledHTTPServer((host, port), _handler(render, healthy, token), limits)
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
        # One request per connection (HTTP/1.0): no idle keep-alive.
        protocol_version = "HTTP/1.0"

        def setup(self) -> None:
            # The head was read by the server (PooledHTTPServer): parse it from memory.
            sock, head = self.request
            self.connection = sock
            self.rfile = io.BytesIO(head)
            self.wfile = sock.makefile("wb", buffering=0)

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
