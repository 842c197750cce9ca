"""OpenAI's HTTP surface on loopback, for :class:`~agentq.scripted_model.ScriptedModel`.

:class:`OpenAIServer` is the part of the scripted model that is HTTP and nothing
else: it routes ``POST /v1/chat/completions`` to a ``complete`` function and
answers ``GET /v1/models`` itself; it checks the bearer key, bounds bodies
(413 past :data:`MAX_BODY_BYTES`), refuses what is no JSON (400) and any other
path (404), all in OpenAI's error shape (:func:`error_body`). An answer may be
held back (``delay``, on the injected clock) and runs ``before_send`` just
before it is written. Clients that go away mid-answer are no error, and
:meth:`OpenAIServer.stop` also closes the kept-alive connections, so nothing is
answered after it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentq.clock import Clock

__all__ = ["MAX_BODY_BYTES", "Answer", "Complete", "OpenAIServer", "error_body"]

#: Bodies over this size are refused with 413 (bounded memory per request).
MAX_BODY_BYTES = 10 * 1024 * 1024
# A body up to this size is read and dropped before the 413, so that a client
# still sending it reads the answer instead of a reset; a larger one is not read.
_DRAIN_LIMIT = 4 * MAX_BODY_BYTES

#: OpenAI's error ``type``, ``code`` and a default message per status.
_ERROR_KINDS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    404: ("invalid_request_error", None, "Not found."),
    413: ("invalid_request_error", "request_too_large", "The request is too large."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached (scripted)."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    kind, code, default = _ERROR_KINDS.get(
        status,
        ("server_error", None, "Server error.") if status >= 500
        else ("invalid_request_error", None, "Invalid request."),
    )  # fmt: skip
    return {"error": {"message": message or default, "type": kind, "param": None, "code": code}}


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: sent after ``delay`` seconds, ``before_send`` called first;
    ``unsent`` is called instead if the server stops during the delay."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    before_send: Callable[[], None] | None = None
    unsent: Callable[[], None] | None = None


#: Answers a chat-completions request: its decoded JSON body and lowercased headers.
Complete = Callable[[Any, dict[str, str]], Answer]


class OpenAIServer:
    """An HTTP server on ``(host, port)`` (0: a free port) answering OpenAI's routes.

    ``models`` are the objects ``GET /v1/models`` lists; with ``api_key``, every
    request needs ``Authorization: Bearer <api_key>`` (401 otherwise).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        complete: Complete,
        models: Sequence[Mapping[str, Any]],
        api_key: str | None,
        clock: Clock,
    ) -> None:
        self.complete = complete
        self.models = list(models)
        self.clock = clock
        # Only a digest is kept: the key is in no attribute, repr or traceback.
        self.authorization = None if api_key is None else _digest(f"Bearer {api_key}")
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._idle = threading.Condition()
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it listens on."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Serve in a background (daemon) thread; once."""
        if self._thread is None and not self.stopping.is_set():
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
            )
            self._thread.start()

    def stop(self, grace: float) -> None:
        """Close the listening socket and every open connection (a held-back answer
        is never sent), then wait up to ``grace`` seconds for handlers still running."""
        self.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread = None
        self._server.server_close()
        with self._idle:
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by its client
            self._idle.wait_for(lambda: not self._connections, timeout=grace)

    def _opened(self, conn: socket.socket) -> None:
        with self._idle:
            self._connections.add(conn)

    def _closed(self, conn: socket.socket) -> None:
        with self._idle:
            self._connections.discard(conn)
            self._idle.notify_all()


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], front: OpenAIServer) -> None:
        self.front = front
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away (a killed worker, a timed-out read) resets its
        # connection: nothing to report. Anything else is still printed.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # An idle keep-alive connection holds a thread; this bounds how long.
    timeout = 60
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test double's access log is noise in the test output

    def setup(self) -> None:
        super().setup()
        # Headers and body are separate writes: without this, a keep-alive
        # client's delayed ACK holds the body back ~40 ms (measured: an
        # instant scripted answer took 44 ms p50 on loopback).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.front._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.front._closed(self.connection)

    def parse_request(self) -> bool:
        # A keep-alive connection outlives stop(); nothing is answered after it.
        if self.server.front.stopping.is_set():
            self.close_connection = True
            return False
        return super().parse_request()

    def do_GET(self) -> None:
        if self._refused_credentials():
            return
        models = self.server.front.models
        path = self.path.split("?")[0]
        found = [m for m in models if path == f"/v1/models/{m['id']}"]
        if path == "/v1/models":
            self._send(Answer(200, {"object": "list", "data": models}))
        elif found:
            self._send(Answer(200, dict(found[0])))
        else:
            self._not_found()

    def do_POST(self) -> None:
        front = self.server.front
        if self.path.split("?")[0] != "/v1/chat/completions":
            self._not_found()
            return
        if self._refused_credentials():
            return
        body = self._read_json()
        if body is None:
            return
        answer = front.complete(body, {k.lower(): v for k, v in self.headers.items()})
        if answer.delay > 0 and front.clock.wait(front.stopping, answer.delay):
            # Stopped while holding the answer back: the server went down unanswered.
            self.close_connection = True
            if answer.unsent is not None:
                answer.unsent()
            return
        if answer.before_send is not None:
            answer.before_send()
        self._send(answer)

    def do_PUT(self) -> None:
        self._not_found()

    do_DELETE = do_PATCH = do_PUT

    def _not_found(self) -> None:
        message = f"Invalid URL ({self.command} {self.path.split('?')[0]})"
        self._discard_body()
        self._send(Answer(404, error_body(404, message)))

    def _refused_credentials(self) -> bool:
        expected = self.server.front.authorization
        if expected is None:
            return False
        given = self.headers.get("Authorization", "")
        # Constant-time comparison; the message never repeats what was sent.
        if hmac.compare_digest(_digest(given), expected):
            return False
        message = (
            "You didn't provide an API key (Authorization: Bearer ...)."
            if not given
            else "Incorrect API key provided."
        )
        self._discard_body()
        self._send(Answer(401, error_body(401, message)))
        return True

    def _length(self) -> int | None:
        if self.headers.get("Transfer-Encoding"):
            return None  # chunked bodies are not read: the connection is closed instead
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return None
        return length if length >= 0 else None

    def _discard_body(self) -> None:
        length = self._length()
        if length is None or length > _DRAIN_LIMIT:
            self.close_connection = True
            return
        while length > 0:
            chunk = self.rfile.read(min(length, 65536))
            if not chunk:
                self.close_connection = True
                return
            length -= len(chunk)

    def _read_json(self) -> Any | None:
        """The decoded body, or None once an error was answered."""
        length = self._length()
        if length is not None and length > MAX_BODY_BYTES:
            self._discard_body()
            message = f"The request body is over {MAX_BODY_BYTES} bytes."
            self._send(Answer(413, error_body(413, message)))
            return None
        data = self.rfile.read(length) if length else b""
        if length is None or len(data) != length:
            self.close_connection = True
            self._send(Answer(400, error_body(400, "A Content-Length is required.")))
            return None
        try:
            return json.loads(data)
        except ValueError:
            message = "We could not parse the JSON body of your request."
            self._send(Answer(400, error_body(400, message)))
            return None

    def _send(self, answer: Answer) -> None:
        data = json.dumps(answer.body).encode()
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Request-Id", f"req_{secrets.token_hex(12)}")
            for name, value in answer.headers.items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            # The client went away mid-answer (a killed worker): not an error here.
            self.close_connection = True
