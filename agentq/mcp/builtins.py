"""The MCP server's own tools (tasks, durable runs, approvals): the scope each
needs, what it does, and its input schema.
"""

from __future__ import annotations

from typing import Any

from agentq.mcp.runs import run_tools
from agentq.server.auth import Scope

__all__ = ["BUILTINS", "MAX_WAIT_SECONDS"]

#: The longest wait a client may ask of ``agentq_wait_task`` (a request is not a
#: place to park for minutes: poll again).
MAX_WAIT_SECONDS = 30.0

_TASK_ID = {"type": "string", "minLength": 1, "maxLength": 200}
#: Each built-in tool by name: the scope it needs, what it does, its input schema.
BUILTINS: dict[str, tuple[Scope, str, dict[str, Any]]] = {
    "agentq_get_task": (Scope.READ, "The current status, result or error of an agentq task.", {
        "type": "object", "properties": {"task_id": _TASK_ID}, "required": ["task_id"],
        "additionalProperties": False,
    }),
    "agentq_wait_task": (Scope.READ, "Wait (at most timeout_seconds) for a task to finish.", {
        "type": "object",
        "properties": {
            "task_id": _TASK_ID,
            "timeout_seconds": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
        },
        "required": ["task_id"], "additionalProperties": False,
    }),
    "agentq_cancel_task": (Scope.ENQUEUE, "Cancel an agentq task that has not finished.", {
        "type": "object", "properties": {"task_id": _TASK_ID}, "required": ["task_id"],
        "additionalProperties": False,
    }),
    **run_tools(MAX_WAIT_SECONDS),
    "agentq_list_approvals": (Scope.APPROVE, "Approval requests waiting for a decision.", {
        "type": "object", "properties": {}, "additionalProperties": False,
    }),
    "agentq_approve": (Scope.APPROVE, "Approve a pending request: its action runs (with "
                       "args: the edited arguments, the whole object, checked like an "
                       "agent's call).", {
        "type": "object",
        "properties": {"approval_id": _TASK_ID, "note": {"type": "string", "maxLength": 2000},
                       "args": {"type": "object"}},
        "required": ["approval_id"], "additionalProperties": False,
    }),
    "agentq_reject": (Scope.APPROVE, "Reject a pending request: its action never runs.", {
        "type": "object",
        "properties": {"approval_id": _TASK_ID, "note": {"type": "string", "maxLength": 2000}},
        "required": ["approval_id"], "additionalProperties": False,
    }),
}  # fmt: skip
