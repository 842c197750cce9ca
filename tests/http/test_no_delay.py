"""The servers send a response as soon as it is written (``TCP_NODELAY``).

uvicorn serving the sockets agentq binds left the accepted ones with Nagle's
algorithm on, and h11 writes a response's head and its body apart: on a
keep-alive connection the body waited for the client's delayed ACK, about 40 ms
for every request of an httpx client (agentq's own client and the framework
adapters use one). The test looks at the socket each connection was served on,
through agentq's real protocol class under a real uvicorn on 127.0.0.1; no
timing is asserted.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest

pytest.importorskip("uvicorn", reason="http: uvicorn is not installed")

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentq.config import ServerLimits
from agentq.server.limits import uvicorn_options
from agentq.server.listen import bind


def test_every_connection_is_served_with_tcp_nodelay() -> None:
    options = uvicorn_options(ServerLimits())
    served: list[int] = []

    class Spy(options["http"]):  # type: ignore[misc,name-defined]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            served.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    def page(request: Request) -> JSONResponse:
        return JSONResponse({"body": "x" * 5000})  # head and body: two writes

    app = Starlette(routes=[Route("/page", page)])
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(
        uvicorn.Config(app, **{**options, "http": Spy, "log_level": "warning"})
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        port = sock.getsockname()[1]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            answers: list[Any] = [client.get("/page").status_code for _ in range(3)]
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as other:
                answers.append(other.get("/page").status_code)
        assert answers == [200, 200, 200, 200]
        assert len(served) == 2  # one keep-alive connection, then another
        assert all(flag != 0 for flag in served), served
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
