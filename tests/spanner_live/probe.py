"""Low-level probes for the live questions: a RECEIVE read off the wire, and a
Spanner error as it comes (code, text, structured details).

They use the backend's raw stream (:mod:`agentq.backends.spanner.streaming`),
so what they see is what Spanner sent, not what agentq made of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc

from agentq.backends.spanner import SpannerBackend
from agentq.backends.spanner.streaming import strong_query
from agentq.spec import QueueSpec

__all__ = ["Wire", "error_of", "read_receive", "send_many"]


@dataclass
class Wire:
    """What one RECEIVE sent, as the client got it."""

    error: str | None = None
    #: Seconds from the call to its first response (None: none came).
    first_response: float | None = None
    #: Per response: (rows, has a resume token).
    responses: list[tuple[int, bool]] = field(default_factory=list)
    #: Seconds until the call ended by itself (None: the probe cancelled it).
    ended_after: float | None = None

    @property
    def rows(self) -> int:
        return sum(n for n, _ in self.responses)

    def summary(self) -> dict[str, Any]:
        first, ended = self.first_response, self.ended_after
        return {
            "error": self.error,
            "first_response_s": None if first is None else round(first, 3),
            "rows": self.rows,
            "responses": len(self.responses),
            "resume_tokens": sum(1 for _, token in self.responses if token),
            "ended_by_itself_after_s": None if ended is None else round(ended, 1),
        }


def read_receive(
    backend: SpannerBackend,
    spec: QueueSpec,
    duration: str,
    *,
    batch: int = 1,
    read_for: float = 2.0,
    stop_after_rows: int | None = None,
) -> Wire:
    """Send ``RECEIVE`` with ``duration`` (as written between its quotes) and read
    its raw responses for up to ``read_for`` seconds (or until ``stop_after_rows``
    rows came), then cancel it unless it ended by itself."""
    sql = backend.dialect.receive_sql(spec, batch, duration)
    wire = Wire()
    started = time.monotonic()
    columns = 0
    try:
        with strong_query(backend, sql, timeout=read_for + 30) as (call, _rows):
            timer = threading.Timer(read_for, call.cancel)
            timer.start()
            try:
                for partial in call:
                    if wire.first_response is None:
                        wire.first_response = time.monotonic() - started
                    if partial.metadata and partial.metadata.row_type.fields:
                        columns = len(partial.metadata.row_type.fields)
                    values = len(partial.values)
                    wire.responses.append((values // columns if columns else 0,
                                           bool(partial.resume_token)))  # fmt: skip
                    if stop_after_rows is not None and wire.rows >= stop_after_rows:
                        break
                else:
                    wire.ended_after = time.monotonic() - started
            except gexc.Cancelled:
                pass  # the probe's own cancel
            finally:
                timer.cancel()
    except gexc.GoogleAPIError as exc:
        wire.error = error_of(exc)
    return wire


def error_of(exc: BaseException) -> str:
    """A Spanner error as it came: its code, text and the kinds of its details."""
    cause: Any = exc
    while getattr(cause, "__cause__", None) is not None and not isinstance(
        cause, gexc.GoogleAPICallError
    ):
        cause = cause.__cause__
    if isinstance(cause, gexc.GoogleAPICallError):
        code = getattr(cause.grpc_status_code, "name", None) or str(cause.code)
        details = [type(d).__name__ + _detail_text(d) for d in (cause.details or [])]
        return f"{code}: {cause.message}" + (f" details={details}" if details else "")
    return f"{type(cause).__name__}: {cause}"


def _detail_text(detail: Any) -> str:
    resource = getattr(detail, "resource_type", None)
    if resource:
        return f"({resource} {getattr(detail, 'resource_name', '')})"
    return ""


def outcome(action: Callable[[], Any]) -> str:
    """``ok`` (with what it returned, if anything) or the error it raised."""
    try:
        result = action()
    except Exception as exc:
        return error_of(exc)
    return "ok" if result is None else f"ok: {result}"


def send_many(backend: SpannerBackend, queue: str, keys: list[tuple[int, str]]) -> None:
    """Send a message under each key, in one transaction."""

    def send(tx: Any) -> None:
        for key in keys:
            tx.send(queue, key, b"x")

    backend.transact(send)
