"""How an agentq task looks to an MCP client.

A tool call answers with a *task handle*: the agentq task id (which is also the
MCP task id), its agentq status and the MCP Tasks vocabulary's status for it
(``working``, ``input_required``, ``completed``, ``failed``, ``cancelled``), its
result or error when it has one, and the approval to decide when it awaits one.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.ledger import TaskInfo, TaskStatus

__all__ = [
    "MCP_STATUS",
    "POLL_INTERVAL_MS",
    "RELATED_TASK_META",
    "mcp_task",
    "task_text",
    "task_view",
]

#: The polling interval suggested to MCP Tasks clients.
POLL_INTERVAL_MS = 1000

#: The MCP Tasks status of each agentq status: a task awaiting a human's
#: approval is ``input_required``; any unfinished one is ``working``.
MCP_STATUS: dict[TaskStatus, str] = {
    TaskStatus.AWAITING_APPROVAL: "input_required",
    TaskStatus.QUEUED: "working",
    TaskStatus.RUNNING: "working",
    TaskStatus.RETRY_SCHEDULED: "working",
    TaskStatus.SUCCEEDED: "completed",
    TaskStatus.DEAD: "failed",
    TaskStatus.CANCELLED: "cancelled",
}

#: The ``_meta`` key MCP uses to relate a message to a task.
RELATED_TASK_META = "io.modelcontextprotocol/related-task"


def _status_message(info: TaskInfo) -> str:
    if info.status is TaskStatus.AWAITING_APPROVAL:
        return f"awaiting a human's approval {info.approval_id}; nothing has run"
    if info.status is TaskStatus.RETRY_SCHEDULED:
        return f"attempt {info.attempt} scheduled after a failure"
    if info.done:
        return f"{info.status.value} after {info.attempt} attempt(s)"
    return f"{info.status.value}; poll agentq_wait_task with this task_id"


def task_view(info: TaskInfo) -> dict[str, Any]:
    """The JSON an MCP client sees of a task (structured content and resources)."""
    return {
        "task_id": info.task_id,
        "tool": info.tool,
        "status": info.status.value,
        "mcp_status": MCP_STATUS[info.status],
        "status_message": _status_message(info),
        "done": info.done,
        "result": info.result,
        "error": info.error,
        "approval_id": info.approval_id,
        "approval_status": info.approval_status,
        "attempt": info.attempt,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
    }


def task_text(info: TaskInfo) -> str:
    """The task as the text content a model reads."""
    return json.dumps(task_view(info), sort_keys=True, default=str)


def mcp_task(info: TaskInfo) -> dict[str, Any]:
    """The task in the MCP Tasks wire shape (``tasks/get``). ``ttl`` is null: the
    ledger keeps tasks until they are deleted."""
    return {
        "taskId": info.task_id,
        "status": MCP_STATUS[info.status],
        "statusMessage": _status_message(info),
        "createdAt": info.created_at.isoformat(),
        "lastUpdatedAt": info.updated_at.isoformat(),
        "ttl": None,
        "pollInterval": POLL_INTERVAL_MS,
    }
