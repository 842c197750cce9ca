"""What the MCP server makes of a ``tools/call``: which task it is (its
idempotency and dedupe keys, from ``_meta`` or the request id), what it answers
with, and :class:`Refused` for a call the principal may not make.

:mod:`agentq.mcp.server` says why the keys are scoped as they are.
"""

from __future__ import annotations

import hashlib
import json
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from agentq.errors import AgentQError
from agentq.ledger import TaskInfo
from agentq.mcp.tasks import RELATED_TASK_META, task_text, task_view
from agentq.server.auth import Principal

__all__ = [
    "DEDUPE_META",
    "IDEMPOTENCY_META",
    "Connections",
    "Refused",
    "call_dedupe_key",
    "call_key",
    "error_result",
    "json_result",
    "task_result",
]

#: The request ``_meta`` key of an explicit idempotency key.
IDEMPOTENCY_META = "agentq/idempotency_key"
#: The request ``_meta`` key of a dedupe key (the dirty-flag pattern).
DEDUPE_META = "agentq/dedupe_key"


class Refused(AgentQError):
    """A call the principal may not make (not authenticated, or lacking a scope)."""


class Connections:
    """A random id per client connection, for scoping request ids."""

    def __init__(self) -> None:
        self._ids: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def scope(self, ctx: ServerRequestContext[Any, Any]) -> str:
        """The scope of ``ctx``'s request ids: its session, else its connection."""
        connection = getattr(ctx.session, "_connection", None)
        session_id = getattr(connection, "session_id", None)
        if isinstance(session_id, str) and session_id:
            return f"s:{session_id}"
        if connection is None:
            return f"r:{uuid.uuid4().hex}"  # nothing to scope by: never deduplicated
        found = self._ids.get(connection)
        if found is None:
            found = self._ids[connection] = uuid.uuid4().hex
        return f"c:{found}"


def call_key(
    principal: Principal, ctx: ServerRequestContext[Any, Any], connections: Connections
) -> str | None:
    """The idempotency key of a call: its ``_meta`` key, else one of its request id
    scoped to the caller and its connection; None without either."""
    meta: Mapping[str, Any] = ctx.meta or {}
    explicit = meta.get(IDEMPOTENCY_META)
    if explicit is not None:
        if not isinstance(explicit, str) or not explicit or len(explicit) > 200:
            raise Refused(f"_meta[{IDEMPOTENCY_META!r}] must be a string of 1 to 200 characters")
        who = hashlib.sha256(principal.name.encode()).hexdigest()[:16]
        return f"mcp:{who}:k:{explicit}"  # one principal cannot claim another's key
    if ctx.request_id is None:
        return None
    who = hashlib.sha256(principal.name.encode()).hexdigest()[:16]
    return f"mcp:{who}:{connections.scope(ctx)}:r:{ctx.request_id}"


def call_dedupe_key(principal: Principal, ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The dedupe key of a call (its ``_meta``), scoped to the caller; None without one."""
    meta: Mapping[str, Any] = ctx.meta or {}
    key = meta.get(DEDUPE_META)
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > 200:
        raise Refused(f"_meta[{DEDUPE_META!r}] must be a string of 1 to 200 characters")
    who = hashlib.sha256(principal.name.encode()).hexdigest()[:16]
    return f"mcp:{who}:{key}"


def task_result(info: TaskInfo) -> types.CallToolResult:
    """A call's answer: the task (an error if it ended dead or cancelled)."""
    return types.CallToolResult(
        content=[types.TextContent(text=task_text(info))],
        structured_content=task_view(info),
        is_error=info.status.value in ("dead", "cancelled"),
        _meta={RELATED_TASK_META: {"taskId": info.task_id}},
    )


def error_result(message: str) -> types.CallToolResult:
    """A call's answer: an error, said in one line."""
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def json_result(data: Any) -> types.CallToolResult:
    """A call's answer: ``data``, as JSON text and as structured content."""
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(data, sort_keys=True, default=str))],
        structured_content=data,
    )
