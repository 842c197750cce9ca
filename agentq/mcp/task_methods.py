"""The MCP Tasks methods ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` over
agentq tasks (the MCP task id is the agentq task id).

The installed SDK (``mcp`` 2.3) defines the Tasks types but dispatches none of
their methods and refuses a ``CreateTaskResult`` from ``tools/call``; a tool
call therefore cannot be task-augmented, and answers with the task handle in
its structured content (and ``_meta["io.modelcontextprotocol/related-task"]``).
These methods are registered as the server's own, so a client that knows the
task id can use the Tasks vocabulary: ``input_required`` while a human's
approval is awaited, ``working``, ``completed``, ``failed``, ``cancelled``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentq.errors import AgentQError
from agentq.mcp.tasks import mcp_task
from agentq.runtime import Runtime
from agentq.server import access
from agentq.server.auth import Principal, Scope

__all__ = ["add_task_methods"]

#: Checks the caller of a request holds a scope (raises if not).
Caller = Callable[[ServerRequestContext[Any, Any], Scope], Principal]
ResultOf = Callable[[Any], types.CallToolResult]


def add_task_methods(
    server: Server[Any], rt: Runtime, caller: Caller, result_of: ResultOf, max_wait: float
) -> None:
    """Serve ``tasks/get``, ``tasks/result`` (waits up to ``max_wait``) and ``tasks/cancel``."""

    def checked(ctx: ServerRequestContext[Any, Any], scope: Scope) -> Principal:
        try:
            return caller(ctx, scope)
        except AgentQError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=f"refused: {exc}") from None

    async def get(
        ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        who = checked(ctx, Scope.READ)
        return mcp_task(await _task(rt, who, params.task_id))

    async def result(
        ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> types.CallToolResult:
        who = checked(ctx, Scope.READ)
        await _task(rt, who, params.task_id)
        return result_of(await rt.wait_async(params.task_id, max_wait))

    async def cancel(
        ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        who = checked(ctx, Scope.ENQUEUE)
        task_id = params.task_id
        try:
            info = await anyio.to_thread.run_sync(
                access.cancel_task, rt, who, task_id, f"cancelled over MCP by {who.name}"
            )
        except AgentQError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        return mcp_task(info)

    server.add_request_handler("tasks/get", types.GetTaskRequestParams, get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel)


async def _task(rt: Runtime, who: Principal, task_id: str) -> Any:
    try:
        return await anyio.to_thread.run_sync(access.task_for, rt, who, task_id)
    except AgentQError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
