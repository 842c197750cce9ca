"""A local payments/notifications/shipping API on loopback, for the demo and tests.

It behaves like a careful payment provider: a request with an
``Idempotency-Key`` it has seen returns the first response and charges nothing
again, so it can count how many refunds were *attempted* versus *applied*.
Faults can be scripted (HTTP 500, 503 with ``Retry-After``) to exercise retries,
and ``on_applied`` is called after a request took effect and before it is
answered (the crash window a chaos test kills workers in).
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["AppliedHook", "DemoAPI", "LoopbackAPI"]

#: Called with the path and the request headers once a request took effect,
#: before its answer is sent.
AppliedHook = Callable[[str, Mapping[str, str]], None]

_ROUTES = {
    "/refunds": ("refund_id", "refunded"),
    "/notifications": ("notification_id", "sent"),
    "/escalations": ("notification_id", "escalated"),
    "/shipments": ("shipment_id", "requested"),
}


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that died (the demo and the chaos test kill workers on purpose)
        # resets its connection: nothing to report. Anything else is still printed.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    responses: dict[tuple[str, str], tuple[int, dict[str, Any]]] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    replays: Counter[str] = field(default_factory=Counter)
    attempts: Counter[tuple[str, str]] = field(default_factory=Counter)
    applied: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    missing_key: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    faults_served: Counter[str] = field(default_factory=Counter)
    faults: list[tuple[str, int, float | None]] = field(default_factory=list)
    stalls: dict[str, tuple[threading.Event, threading.Event]] = field(default_factory=dict)


class LoopbackAPI:
    """The loopback server; use as a context manager or call start()/stop().

    The one class behind ``agentq.testing.LoopbackAPI`` and
    ``agentq.demo.LoopbackAPI`` (the same object under each name)."""

    def __init__(self, host: str = "127.0.0.1", *, on_applied: AppliedHook | None = None) -> None:
        self.state = _State()
        state = self.state

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                if path not in _ROUTES:
                    self._reply(404, {"error": "not found"})
                    return
                key = self.headers.get("Idempotency-Key")
                with state.lock:
                    state.requests[path] += 1
                    for i, (fault_path, status, retry_after) in enumerate(state.faults):
                        if fault_path == path:
                            del state.faults[i]
                            state.faults_served[path] += 1
                            headers = (
                                {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
                            )
                            self._reply(status, {"error": "injected fault"}, headers)
                            return
                    if not key:
                        state.missing_key += 1
                        state.refused[path] += 1
                        self._reply(400, {"error": "Idempotency-Key header required"})
                        return
                    state.attempts[(path, key)] += 1
                    seen = state.responses.get((path, key))
                    if seen is not None:
                        state.replays[path] += 1
                        self._reply(*seen)
                        return
                    id_field, status_text = _ROUTES[path]
                    response = {
                        id_field: f"{id_field[:2]}_{uuid.uuid4().hex[:12]}",
                        "status": status_text,
                    }
                    state.responses[(path, key)] = (200, response)
                    state.applied.append((path, body | {"idempotency_key": key}))
                    stall = state.stalls.pop(str(body.get("order_id")), None)
                if on_applied is not None:
                    on_applied(path, dict(self.headers.items()))
                if stall is not None:
                    # The charge is applied; the answer is held back (a crash window).
                    stall[0].set()
                    stall[1].wait(30)
                self._reply(200, response)

            def _reply(
                self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client died mid-request (the demo kills a worker on purpose)

        self._server = _Server((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LoopbackAPI:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LoopbackAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_next(self, path: str, status: int, retry_after: float | None = None) -> None:
        """Answer the next request to ``path`` with ``status`` (and Retry-After)."""
        with self.state.lock:
            self.state.faults.append((path, status, retry_after))

    def stall_after_applying(self, order_id: str) -> tuple[threading.Event, threading.Event]:
        """The next refund of ``order_id`` is applied, then its answer waits.

        Returns (received, release): ``received`` is set once the charge is
        applied; the answer is sent when ``release`` is set.
        """
        received, release = threading.Event(), threading.Event()
        with self.state.lock:
            self.state.stalls[order_id] = (received, release)
        return received, release

    def applied(self, path: str = "/refunds") -> list[dict[str, Any]]:
        """Bodies of requests that took effect (first use of their key)."""
        with self.state.lock:
            return [body for p, body in self.state.applied if p == path]

    def replays(self, path: str = "/refunds") -> int:
        """Requests answered from the idempotency store (a duplicate prevented)."""
        with self.state.lock:
            return self.state.replays[path]

    def scripted_failures(self, path: str = "/refunds") -> int:
        """Requests answered with a fault scripted by :meth:`fail_next`."""
        with self.state.lock:
            return self.state.faults_served[path]

    def refused(self, path: str = "/refunds") -> int:
        """Requests refused for want of an ``Idempotency-Key`` (400)."""
        with self.state.lock:
            return self.state.refused[path]

    def requests(self, path: str = "/refunds") -> int:
        """All requests received on ``path``."""
        with self.state.lock:
            return self.state.requests[path]

    def attempts_per_key(self, path: str = "/refunds") -> Counter[str]:
        """How many requests each idempotency key made (applied or answered again)."""
        with self.state.lock:
            return Counter({k: n for (p, k), n in self.state.attempts.items() if p == path})

    def charges_per_key(self, path: str = "/refunds") -> Counter[str]:
        """How many times each idempotency key took effect (must all be 1)."""
        return Counter(body["idempotency_key"] for body in self.applied(path))


#: The name this class had first; the same class.
DemoAPI = LoopbackAPI
