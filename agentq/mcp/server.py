"""The MCP server: agentq's tools as MCP tools whose calls enqueue durable tasks.

Every tool an agent may call (:meth:`Runtime.tool_schemas`: internal and hidden
tools are never offered) becomes an MCP tool. A call validates the arguments,
enqueues the task through :meth:`Runtime.enqueue_action` and answers with the
task's result if it finishes within a short wait, else with a task handle
(:mod:`agentq.mcp.tasks`) the client polls with ``agentq_get_task`` /
``agentq_wait_task`` or reads as the resource ``agentq://tasks/{task_id}``.
Everything lives in the database, so a restarted server answers for the tasks
its predecessor created.

Durable agent runs (:mod:`agentq.mcp.runs`): ``agentq_start_run`` starts one
owned by the caller; asked task-augmented (``tools/call`` with ``task``), it
answers as the MCP task that is the run (its id is the run id), else with the
run's id and status. ``agentq_get_run`` (which may wait), ``agentq_cancel_run``,
``agentq_send_message`` and ``agentq_list_runs`` follow the tasks' rule: a
principal's own runs only, unless it sees all (:mod:`agentq.server.access`).

Every wait a client parks here (``agentq_wait_task``, ``agentq_get_run`` with
``wait_seconds``, ``tasks/result``) counts against the principal's
``max_waits_per_principal``; one more is refused until one ends.

A call's ``_meta["agentq/dedupe_key"]`` collapses the same call into its key's
pending task (:mod:`agentq.lifecycle.dedupe`; scoped to the caller).

Each call's idempotency key is the request's ``_meta["agentq/idempotency_key"]``
when given (stable across reconnects and restarts), else one derived from the
JSON-RPC request id, scoped to the caller and its connection (request ids
restart at 1 on every connection: unscoped, a new client's call would be
answered with an old client's task).

Who calls is a :class:`~agentq.server.auth.Principal` found by the transport (a
bearer token on HTTP, checked by the HTTP API's authentication; the operator's
grant on stdio); its scopes (``read``, ``enqueue``, ``approve``, ``admin``)
decide what it sees and may call, and approvals record its name, never one the
caller typed.

What a call's keys and answers are is :mod:`agentq.mcp.calls`'; the server's own
tools' schemas are :mod:`agentq.mcp.builtins`'.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentq.errors import AgentQError, ConfigError, RunNotFound
from agentq.mcp.builtins import BUILTINS, MAX_WAIT_SECONDS
from agentq.mcp.calls import (
    DEDUPE_META,
    IDEMPOTENCY_META,
    Connections,
    Refused,
    call_dedupe_key,
    call_key,
    error_result,
    json_result,
    task_result,
)
from agentq.mcp.runs import MAX_RUNS_LISTED, RUN_TOOLS, run_result, run_view
from agentq.mcp.task_methods import add_task_methods
from agentq.mcp.tasks import task_text
from agentq.run_info import RunStatus
from agentq.runtime import Runtime
from agentq.server import access
from agentq.server.auth import Principal, Scope
from agentq.server.problems import Problem
from agentq.server.state import WaitSlots
from agentq.tools.registry import unknown_tool

__all__ = [
    "DEDUPE_META",
    "IDEMPOTENCY_META",
    "MAX_WAIT_SECONDS",
    "PrincipalLookup",
    "Refused",
    "build_server",
]

_TASK_URI = "agentq://tasks/"


#: Finds the caller of a request (raises AgentQError, or returns None: refused).
PrincipalLookup = Callable[[ServerRequestContext[Any, Any]], Principal | None]


def build_server(
    rt: Runtime,
    principal_of: PrincipalLookup,
    *,
    wait_seconds: float = 1.0,
    name: str = "agentq",
    max_waits_per_principal: int = 100,
) -> Server[Any]:
    """An MCP server (the SDK's low-level ``Server``) over ``rt``.

    ``principal_of`` names the caller of each request; ``wait_seconds`` is how
    long a tool call waits for its task before answering with a handle;
    ``max_waits_per_principal`` how many waits one principal may park at once.
    """
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise ConfigError(f"wait_seconds must be between 0 and {MAX_WAIT_SECONDS}")
    if type(max_waits_per_principal) is not int or max_waits_per_principal < 1:
        raise ConfigError("max_waits_per_principal must be a positive integer")
    agent_tools = {s["function"]["name"]: s["function"] for s in rt.tool_schemas()}
    clash = sorted(set(agent_tools) & set(BUILTINS))
    if clash:
        raise ConfigError(f"tool name(s) {', '.join(clash)} are reserved by the MCP server")
    connections = Connections()
    slots = WaitSlots(max_waits_per_principal)

    @asynccontextmanager
    async def parked(principal: Principal) -> AsyncIterator[None]:
        """One of ``principal``'s waits (refused beyond its cap)."""
        try:
            release = slots.take(principal.name)
        except Problem as exc:
            raise Refused(exc.detail) from None
        try:
            yield
        finally:
            release()

    def caller(ctx: ServerRequestContext[Any, Any], scope: Scope) -> Principal:
        principal = principal_of(ctx)
        if principal is None:
            raise Refused("not authenticated")
        if not principal.may(scope):
            raise Refused(f"principal {principal.name!r} lacks the {scope.value!r} scope")
        return principal

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = principal_of(ctx)
        if principal is None:
            return types.ListToolsResult(tools=[])
        tools = []
        if principal.may(Scope.ENQUEUE):
            tools += [
                types.Tool(name=n, description=f["description"], input_schema=f["parameters"])
                for n, f in sorted(agent_tools.items())
            ]
        tools += [
            types.Tool(name=n, description=d, input_schema=s)
            for n, (scope, d, s) in BUILTINS.items()
            if principal.may(scope)
        ]
        return types.ListToolsResult(tools=tools)

    async def enqueue(
        ctx: ServerRequestContext[Any, Any], tool: str, args: dict[str, Any]
    ) -> types.CallToolResult:
        principal = caller(ctx, Scope.ENQUEUE)
        key = call_key(principal, ctx, connections)
        dedupe_key = call_dedupe_key(principal, ctx)
        reason = f"mcp:{principal.name}"
        info = await anyio.to_thread.run_sync(
            lambda: rt.enqueue_action(
                tool, args, idempotency_key=key, reason=reason, dedupe_key=dedupe_key,
                by=principal.name,
            )
        )
        if not info.done and wait_seconds > 0 and info.status.value != "awaiting_approval":
            info = await rt.wait_async(info.task_id, wait_seconds)
        return task_result(info)

    async def builtin(
        ctx: ServerRequestContext[Any, Any], tool: str, args: dict[str, Any]
    ) -> types.CallToolResult:
        scope = BUILTINS[tool][0]
        principal = caller(ctx, scope)
        if tool == "agentq_get_task":
            return task_result(await anyio.to_thread.run_sync(
                access.task_for, rt, principal, str(args["task_id"])
            ))  # fmt: skip
        if tool == "agentq_wait_task":
            timeout = float(args.get("timeout_seconds", wait_seconds))
            if not math.isfinite(timeout) or timeout < 0:
                raise ValueError(f"timeout_seconds must be from 0 to {MAX_WAIT_SECONDS:g}")
            timeout = min(timeout, MAX_WAIT_SECONDS)
            task_id = str(args["task_id"])
            await anyio.to_thread.run_sync(access.task_for, rt, principal, task_id)
            async with parked(principal):
                return task_result(await rt.wait_async(task_id, timeout))
        if tool == "agentq_cancel_task":
            task_id = str(args["task_id"])
            return task_result(await anyio.to_thread.run_sync(
                access.cancel_task, rt, principal, task_id,
                f"cancelled over MCP by {principal.name}",
            ))  # fmt: skip
        if tool == "agentq_list_approvals":
            pending = await anyio.to_thread.run_sync(
                lambda: access.visible_approvals(rt, principal, rt.approvals())
            )
            return json_result({"approvals": [
                a.model_dump(mode="json") for a in pending
                if a.status.value in ("pending", "escalated")
            ]})  # fmt: skip
        approval_id, note = str(args["approval_id"]), str(args.get("note", ""))
        # One the caller may not see is "no approval", as one that does not
        # exist: else "may not decide it" would tell the ids apart.
        await anyio.to_thread.run_sync(access.approval_for, rt, principal, approval_id)
        if tool == "agentq_approve":
            edited = args.get("args")
            return task_result(await anyio.to_thread.run_sync(
                lambda: rt.approve(approval_id, principal.name, note, args=edited)
            ))  # fmt: skip
        return task_result(
            await anyio.to_thread.run_sync(lambda: rt.reject(approval_id, principal.name, note))
        )

    async def run_tool(
        ctx: ServerRequestContext[Any, Any], tool: str, args: dict[str, Any], *, as_task: bool
    ) -> types.CallToolResult:
        principal = caller(ctx, BUILTINS[tool][0])

        def answer(info: Any) -> types.CallToolResult:
            return run_result(run_view(info, rt), as_task=as_task)

        if tool == "agentq_start_run":
            agent, text = str(args["agent"]), str(args["input"])
            explicit = args.get("idempotency_key")
            # An explicit key is the run's (runs' keys are per owner already);
            # else the call's, as a tool call's: a retried request starts nothing new.
            key = str(explicit) if explicit is not None else call_key(principal, ctx, connections)
            return await anyio.to_thread.run_sync(lambda: answer(
                rt.start_run(agent, text, idempotency_key=key, by=principal.name)
            ))  # fmt: skip
        if tool == "agentq_list_runs":
            limit = int(args.get("limit", MAX_RUNS_LISTED))
            if not 0 < limit <= MAX_RUNS_LISTED:
                raise ValueError(f"limit must be from 1 to {MAX_RUNS_LISTED}")
            status = RunStatus(args["status"]) if args.get("status") is not None else None
            agent_name = args.get("agent")
            # Another's runs are not listed, exactly as if there were none.
            owner = None if access.sees_all(principal) else principal.name
            found = await anyio.to_thread.run_sync(lambda: rt.runs(
                status, agent=None if agent_name is None else str(agent_name), owner=owner,
                limit=limit, after=str(args.get("after", "")),
            ))  # fmt: skip
            views = [run_view(i) for i in access.visible_runs(principal, found)]
            next_after = found[-1].run_id if len(found) == limit else None
            return json_result({"runs": views, "next_after": next_after})
        run_id = str(args["run_id"])
        seen = await anyio.to_thread.run_sync(access.run_for, rt, principal, run_id)
        if tool == "agentq_get_run":
            timeout = float(args.get("wait_seconds", 0))
            if not math.isfinite(timeout) or timeout < 0:
                raise ValueError(f"wait_seconds must be from 0 to {MAX_WAIT_SECONDS:g}")
            until = str(args.get("until", "idle"))
            if timeout == 0 or seen.done or (until == "idle" and seen.idle):
                return await anyio.to_thread.run_sync(answer, seen)
            async with parked(principal):
                info = await rt.wait_run_async(run_id, min(timeout, MAX_WAIT_SECONDS), until=until)
            return await anyio.to_thread.run_sync(answer, info)
        if tool == "agentq_cancel_run":
            if not access.may_cancel_run(principal, seen):
                raise RunNotFound(f"no run {run_id!r}")
            return await anyio.to_thread.run_sync(lambda: answer(
                rt.cancel_run(run_id, "cancelled over MCP", by=principal.name)
            ))  # fmt: skip
        text = str(args["text"])  # agentq_send_message: its owner's only (the runtime checks)
        key = args.get("idempotency_key")
        return await anyio.to_thread.run_sync(lambda: answer(rt.send_message(
            run_id, text, by=principal.name, idempotency_key=None if key is None else str(key))))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        try:
            if params.name in RUN_TOOLS:
                return await run_tool(ctx, params.name, args, as_task=params.task is not None)
            if params.name in BUILTINS:
                return await builtin(ctx, params.name, args)
            if params.name not in agent_tools:
                return error_result(unknown_tool(params.name, agent_tools, "tools you may call"))
            return await enqueue(ctx, params.name, args)
        except Refused as exc:
            return error_result(f"refused: {exc}")
        except AgentQError as exc:  # bad arguments, unknown task, reused key...
            return error_result(f"agentq: {exc}")
        except (KeyError, TypeError, ValueError) as exc:
            return error_result(f"invalid arguments for {params.name!r}: {exc}")

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            name="agentq task", uri_template=_TASK_URI + "{task_id}",
            description="status, result or error of an agentq task", mime_type="application/json",
        )])  # fmt: skip

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])  # tasks are addressed by id, not listed

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            principal = caller(ctx, Scope.READ)
            if not uri.startswith(_TASK_URI):
                raise AgentQError(f"unknown resource {uri!r}")
            info = await anyio.to_thread.run_sync(
                access.task_for, rt, principal, uri.removeprefix(_TASK_URI)
            )
        except AgentQError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type="application/json", text=task_text(info),
        )])  # fmt: skip

    server: Server[Any] = Server(
        name,
        instructions=(
            "Tool calls enqueue durable agentq tasks. A call answers with the result if the "
            "task finishes quickly, else with a task handle: poll agentq_wait_task with its "
            "task_id. mcp_status 'input_required' means a human must approve it first. "
            "agentq_start_run starts a durable agent run: poll agentq_get_run with its run_id."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resource_templates=list_templates,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    add_task_methods(server, rt, caller, task_result, MAX_WAIT_SECONDS, parked)
    return server
