"""How a durable agent run looks to an MCP client, and the run tools' schemas.

A run (:class:`~agentq.run_info.RunInfo`) is shown as its *run view*: its id,
agentq status and the MCP Tasks vocabulary's status for it, the approvals it
waits for, its output or error, its turns and token usage. Started with a
task-augmented ``tools/call``, a run is the MCP task: the MCP task id is the
run id, and ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` speak of it
(:mod:`agentq.mcp.task_methods`).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from agentq.ledger import TaskStatus
from agentq.lifecycle.runs import MAX_INPUT_CHARS
from agentq.mcp.tasks import POLL_INTERVAL_MS, RELATED_TASK_META
from agentq.run_info import RunInfo, RunStatus
from agentq.runtime import Runtime
from agentq.server.auth import Scope

__all__ = [
    "MAX_RUNS_LISTED",
    "RUN_MCP_STATUS",
    "RUN_TOOLS",
    "is_run_id",
    "mcp_run_task",
    "run_result",
    "run_view",
]

#: Most runs one ``agentq_list_runs`` answers with.
MAX_RUNS_LISTED = 100

#: The MCP Tasks status of each run status: a run waiting for a human's
#: approval is ``input_required``; any other unfinished one is ``working``.
RUN_MCP_STATUS: dict[RunStatus, str] = {
    RunStatus.QUEUED: "working",
    RunStatus.RUNNING: "working",
    RunStatus.AWAITING_TOOLS: "working",
    RunStatus.AWAITING_APPROVAL: "input_required",
    RunStatus.SUCCEEDED: "completed",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELLED: "cancelled",
}

_RUN_ID = {"type": "string", "minLength": 1, "maxLength": 200}
_KEY = {"type": "string", "minLength": 1, "maxLength": 200}
_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_INPUT_CHARS}


def run_tools(max_wait: float) -> dict[str, tuple[Scope, str, dict[str, Any]]]:
    """The run tools: name -> (scope needed, description, input schema)."""
    return {
        "agentq_start_run": (Scope.ENQUEUE, "Start a durable run of an agentq agent on a user "
                             "message (owned by you); task-augmented, the call is an MCP task "
                             "whose id is the run id.", {
            "type": "object",
            "properties": {"agent": {"type": "string", "minLength": 1, "maxLength": 200},
                           "input": _TEXT, "idempotency_key": _KEY},
            "required": ["agent", "input"], "additionalProperties": False,
        }),
        "agentq_get_run": (Scope.READ, "A durable run's status, output or error; with "
                           "wait_seconds, wait (at most that) until it is idle (answered, "
                           "or waiting for a human) or, with until 'done', finished.", {
            "type": "object",
            "properties": {"run_id": _RUN_ID,
                           "wait_seconds": {"type": "number", "minimum": 0, "maximum": max_wait},
                           "until": {"type": "string", "enum": ["idle", "done"]}},
            "required": ["run_id"], "additionalProperties": False,
        }),
        "agentq_cancel_run": (Scope.ENQUEUE, "Cancel a durable run: its queued turn and "
                              "unfinished tool calls are cancelled.", {
            "type": "object", "properties": {"run_id": _RUN_ID}, "required": ["run_id"],
            "additionalProperties": False,
        }),
        "agentq_send_message": (Scope.ENQUEUE, "Continue a durable run that answered "
                                "(succeeded) with your next message. With idempotency_key, "
                                "a retry with the same key and text appends nothing.", {
            "type": "object",
            "properties": {"run_id": _RUN_ID, "text": _TEXT,
                           "idempotency_key": {"type": "string", "minLength": 1,
                                               "maxLength": 200}},
            "required": ["run_id", "text"], "additionalProperties": False,
        }),
        "agentq_list_runs": (Scope.READ, "Your durable runs, newest first.", {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": [s.value for s in RunStatus]},
                "agent": {"type": "string", "maxLength": 200},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RUNS_LISTED},
                "after": {"type": "string", "maxLength": 200},
            },
            "additionalProperties": False,
        }),
    }  # fmt: skip


#: The run tools' names.
RUN_TOOLS = frozenset(run_tools(0.0))


def is_run_id(some_id: str) -> bool:
    """Whether an MCP task id names a run (``run_...``) rather than a task."""
    return some_id.startswith("run_")


def _status_message(info: RunInfo, approvals: list[str]) -> str:
    status = info.status
    if status is RunStatus.QUEUED:
        return f"turn {info.turn} queued for a worker; poll agentq_get_run with this run_id"
    if status is RunStatus.RUNNING:
        return f"turn {info.turn}: a worker is asking the model"
    if status is RunStatus.AWAITING_TOOLS:
        return f"waiting for {len(info.pending)} tool call(s) of turn {info.turn}"
    if status is RunStatus.AWAITING_APPROVAL:
        which = f" {', '.join(approvals)}" if approvals else ""
        return f"a tool call awaits a human's approval{which}; it has not run"
    if status is RunStatus.SUCCEEDED:
        return f"answered after {len(info.turns)} turn(s); agentq_send_message continues it"
    return f"{status.value}: {info.error}"


def _awaited_approvals(rt: Runtime, info: RunInfo) -> list[str]:
    if info.status is not RunStatus.AWAITING_APPROVAL:
        return []
    found = []
    for task_id in info.pending:
        task = rt.task(task_id)
        if task.status is TaskStatus.AWAITING_APPROVAL and task.approval_id:
            found.append(task.approval_id)
    return found


def run_view(info: RunInfo, rt: Runtime | None = None) -> dict[str, Any]:
    """The JSON an MCP client sees of a run; with ``rt``, the approvals it awaits
    are read too (a blocking read: call it off the event loop)."""
    approvals = _awaited_approvals(rt, info) if rt is not None else []
    return {
        "run_id": info.run_id,
        "agent": info.agent,
        "owner": info.owner,
        "status": info.status.value,
        "mcp_status": RUN_MCP_STATUS[info.status],
        "status_message": _status_message(info, approvals),
        "done": info.done,
        "idle": info.idle,
        "turn": info.turn,
        "turns": len(info.turns),
        "output": info.output,
        "error": info.error,
        "usage": info.usage.model_dump(mode="json"),
        "pending": list(info.pending),
        "approval_ids": approvals,
        "idempotency_key": info.idempotency_key,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
    }


def run_result(view: dict[str, Any], *, as_task: bool) -> types.CallToolResult:
    """A tool result of a run's ``view``: the text is the run's answer once it
    succeeded, else the view as JSON; ``as_task`` relates it to the MCP task
    that is the run (``_meta["io.modelcontextprotocol/related-task"]``)."""
    answered = view["status"] == RunStatus.SUCCEEDED.value and view["output"] is not None
    text = str(view["output"]) if answered else json.dumps(view, sort_keys=True, default=str)
    failed = view["status"] in (RunStatus.FAILED.value, RunStatus.CANCELLED.value)
    content: list[types.ContentBlock] = [types.TextContent(text=text)]
    if as_task:
        return types.CallToolResult(
            content=content, structured_content=view, is_error=failed,
            _meta={RELATED_TASK_META: {"taskId": view["run_id"]}},
        )  # fmt: skip
    return types.CallToolResult(content=content, structured_content=view, is_error=failed)


def mcp_run_task(info: RunInfo) -> dict[str, Any]:
    """The run in the MCP Tasks wire shape (``tasks/get``): the task id is the run
    id. ``ttl`` is null: runs are kept until they are deleted."""
    return {
        "taskId": info.run_id,
        "status": RUN_MCP_STATUS[info.status],
        "statusMessage": _status_message(info, []),
        "createdAt": info.created_at.isoformat(),
        "lastUpdatedAt": info.updated_at.isoformat(),
        "ttl": None,
        "pollInterval": POLL_INTERVAL_MS,
    }
