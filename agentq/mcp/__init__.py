"""agentq as an MCP server (``agentq mcp``; the optional extra ``agentq-runtime[mcp]``).

:mod:`agentq.mcp.server` builds the server (tools enqueue, tasks are polled),
:mod:`agentq.mcp.transports` serves it over stdio or authenticated streamable
HTTP, :mod:`agentq.mcp.tasks` shapes a task for MCP clients, :mod:`agentq.mcp.runs`
a durable agent run, and
:mod:`agentq.mcp.command` is the CLI wiring. Importing this package imports no
part of the MCP SDK.
"""
