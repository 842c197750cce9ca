"""The HTTP servers' limits against slow and idle clients (issue 27 item 11).

``agentq serve``, ``agentq ui`` and ``agentq mcp --transport http`` run uvicorn
through :func:`agentq.server.listen.run`, which applies
:class:`~agentq.config.ServerLimits` (``[servers]`` in ``agentq.toml``):

* **idle keep-alive**: uvicorn's ``timeout_keep_alive`` closes a connection
  idle between requests after ``keep_alive_timeout`` seconds;
* **many connections**: uvicorn's ``limit_concurrency`` answers 503 beyond
  ``max_connections`` connections or requests in progress;
* **slow headers** (ours: uvicorn waits for ever for a request's first byte
  and for the rest of its headers): a connection that has not sent a whole
  request line and headers ``header_timeout`` seconds after it was opened, or
  after the previous answer, is closed — with a 408 if it sent part of them.
  A client that opens connections and trickles a header byte now and then
  (slowloris) held every one of them before;
* **slow bodies** (ours: uvicorn has no deadline for a body either):
  :class:`BodyDeadline` gives a request ``body_timeout`` seconds from the end
  of its headers to send all of its body, then answers 408 and closes.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentq.config import ServerLimits

__all__ = ["BodyDeadline", "header_deadline_protocol", "uvicorn_options"]

_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 24\r\n\r\nrequest headers too slow"
)


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """Send each write at once (``TCP_NODELAY``). uvicorn serving pre-bound sockets
    leaves the accepted ones with Nagle's algorithm on, and h11 writes a response's
    head and body apart: on a keep-alive connection the body then waited for the
    client's delayed ACK, about 40 ms a request (a trivial JSON answer took 47.8 ms
    from an httpx client on loopback, 2.7 ms with this)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # the client is gone already: nothing to send to


def header_deadline_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for each request's line and headers."""

    class HeaderDeadline(H11Protocol):
        """Closes a connection whose next request head is not in within ``seconds``."""

        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            _no_delay(transport)
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm()

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request's head was read: its cycle began
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's head (uvicorn's keep-alive timer runs too)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_slow(self) -> None:
            self._head_timer = None
            if self.transport.is_closing():
                return
            started = self.conn.their_state is not h11.IDLE or bool(self.conn.trailing_data[0])
            if started:
                self.transport.write(_TIMED_OUT)
            self.transport.close()

    return HeaderDeadline


class BodyDeadline:
    """ASGI middleware: a request's body must be in within ``seconds`` of its
    headers, or the answer is 408 and the connection closes. Reading after the
    body (an event stream waiting for the client to go) is not limited."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        body_done = False
        timed_out = False

        async def timed_receive() -> Message:
            nonlocal body_done, timed_out
            if body_done or timed_out:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except TimeoutError:
                timed_out = True
                await _answer_408(send)
                # To the app the client is gone: its reads end, its answer is dropped.
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def guarded_send(message: Message) -> None:
            if not timed_out:
                await send(message)

        try:
            await self.app(scope, timed_receive, guarded_send)
        except Exception:
            if not timed_out:
                raise  # a failure of the app's own, not the body's deadline


async def _answer_408(send: Send) -> None:
    body = b"request body too slow"
    try:
        await send({
            "type": "http.response.start", "status": 408,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()), (b"connection", b"close")],
        })  # fmt: skip
        await send({"type": "http.response.body", "body": body})
    except Exception:  # the app had begun its answer, or the client went: just close
        pass


def uvicorn_options(limits: ServerLimits) -> dict[str, Any]:
    """:class:`uvicorn.Config` options for ``limits`` (the body deadline is
    middleware: see :func:`agentq.server.listen.run`)."""
    return {
        "http": header_deadline_protocol(limits.header_timeout),
        "timeout_keep_alive": limits.keep_alive_timeout,
        "limit_concurrency": limits.max_connections,
        "timeout_graceful_shutdown": limits.shutdown_grace,
    }
