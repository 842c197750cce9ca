"""A loopback payments API that ignores ``Idempotency-Key``, for examples and tests.

Unlike :class:`agentq.testing.LoopbackAPI`, every ``POST /charges`` charges
again, as many real providers do: calling it twice for one task charges twice.
What it offers instead is a lookup: ``GET /charges?reference=REF`` lists the
charges made with that reference (agentq's tools pass the task id), which is what
a tool's ``reconcile`` handler asks before charging again. It listens on
``127.0.0.1`` only, has no authentication and holds nothing real.

    with NaivePaymentsAPI() as api:
        httpx.post(f"{api.url}/charges", json={"reference": "t1", "amount": 5})
        assert len(api.charges_for("t1")) == 1
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["NaivePaymentsAPI"]

#: Largest request body read (anything longer is refused).
_MAX_BODY = 64 * 1024


class NaivePaymentsAPI:
    """The server described in the module docstring; a context manager (or
    :meth:`start` / :meth:`stop`). ``url`` is its base URL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._charges: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    def charges_for(self, reference: str) -> list[dict[str, Any]]:
        """Every charge made with ``reference``."""
        with self._lock:
            return [dict(c) for c in self._charges if c["reference"] == reference]

    @property
    def charges(self) -> list[dict[str, Any]]:
        """Every charge made, oldest first."""
        with self._lock:
            return [dict(c) for c in self._charges]

    def _charge(self, body: dict[str, Any]) -> dict[str, Any]:
        charge = {
            "charge_id": f"ch_{uuid.uuid4().hex[:12]}",
            "reference": str(body.get("reference", "")),
            "amount": body.get("amount"),
        }
        with self._lock:
            self._charges.append(charge)
        return charge

    def start(self) -> NaivePaymentsAPI:
        """Listen on a free loopback port, serving from a daemon thread."""
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if urlsplit(self.path).path != "/charges" or not 0 <= length <= _MAX_BODY:
                    self._answer(404 if length <= _MAX_BODY else 413, {"error": "no such route"})
                    return
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._answer(400, {"error": "body is not JSON"})
                    return
                if not isinstance(body, dict):
                    self._answer(400, {"error": "body is not an object"})
                    return
                self._answer(201, api._charge(body))

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != "/charges":
                    self._answer(404, {"error": "no such route"})
                    return
                reference = parse_qs(parts.query).get("reference", [""])[0]
                self._answer(200, {"charges": api.charges_for(reference)})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> NaivePaymentsAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
