"""The MCP Tasks methods ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` over
agentq tasks (the MCP task id is the agentq task id).

The installed SDK (``mcp`` 2.3) defines the Tasks types but dispatches none of
their methods and refuses a ``CreateTaskResult`` from ``tools/call``; a tool
call therefore cannot be task-augmented, and answers with the task handle in
its structured content (and ``_meta["io.modelcontextprotocol/related-task"]``).
These methods are registered as the server's own, so a client that knows the
task id can use the Tasks vocabulary: ``input_required`` while a human's
approval is awaited, ``working``, ``completed``, ``failed``, ``cancelled``.

A task id that is a run id (``run_...``: ``agentq_start_run`` called
task-augmented) speaks of the durable run (:mod:`agentq.mcp.runs`):
``tasks/result`` waits for it to finish and answers with its output.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentq.errors import AgentQError, RunNotFound
from agentq.mcp.runs import is_run_id, mcp_run_task, run_result, run_view
from agentq.mcp.tasks import mcp_task
from agentq.runtime import Runtime
from agentq.server import access
from agentq.server.auth import Principal, Scope

__all__ = ["add_task_methods"]

#: Checks the caller of a request holds a scope (raises if not).
Caller = Callable[[ServerRequestContext[Any, Any], Scope], Principal]
ResultOf = Callable[[Any], types.CallToolResult]
#: One of a principal's parked waits (refused beyond its cap).
Parked = Callable[[Principal], AbstractAsyncContextManager[None]]


def add_task_methods(
    server: Server[Any],
    rt: Runtime,
    caller: Caller,
    result_of: ResultOf,
    max_wait: float,
    parked: Parked,
) -> None:
    """Serve ``tasks/get``, ``tasks/result`` (waits up to ``max_wait``, one of
    the caller's ``parked`` waits) and ``tasks/cancel``."""

    def checked(ctx: ServerRequestContext[Any, Any], scope: Scope) -> Principal:
        try:
            return caller(ctx, scope)
        except AgentQError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=f"refused: {exc}") from None

    async def get(
        ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        who = checked(ctx, Scope.READ)
        if is_run_id(params.task_id):
            return mcp_run_task(await _run(rt, who, params.task_id))
        return mcp_task(await _task(rt, who, params.task_id))

    async def result(
        ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> types.CallToolResult:
        who = checked(ctx, Scope.READ)
        if is_run_id(params.task_id):
            await _run(rt, who, params.task_id)
            try:
                async with parked(who):
                    run = await rt.wait_run_async(params.task_id, max_wait, until="done")
            except AgentQError as exc:  # over the caller's waits, or gone meanwhile
                raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from None
            view = await anyio.to_thread.run_sync(run_view, run, rt)
            return run_result(view, as_task=True)
        await _task(rt, who, params.task_id)
        try:
            async with parked(who):
                return result_of(await rt.wait_async(params.task_id, max_wait))
        except AgentQError as exc:  # over the caller's waits, or gone meanwhile
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from None

    async def cancel(
        ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        who = checked(ctx, Scope.ENQUEUE)
        task_id = params.task_id
        try:
            if is_run_id(task_id):
                return mcp_run_task(await anyio.to_thread.run_sync(_cancel_run, rt, who, task_id))
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


async def _run(rt: Runtime, who: Principal, run_id: str) -> Any:
    try:
        return await anyio.to_thread.run_sync(access.run_for, rt, who, run_id)
    except AgentQError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None


def _cancel_run(rt: Runtime, who: Principal, run_id: str) -> Any:
    """Cancel the run for ``who``, if it may (else as a run that does not exist)."""
    if not access.may_cancel_run(who, access.run_for(rt, who, run_id)):
        raise RunNotFound(f"no run {run_id!r}")
    return rt.cancel_run(run_id, "cancelled over MCP", by=who.name)
