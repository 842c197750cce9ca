"""What a durable run's model is told its tool calls came to: one ``tool``
message per call of a turn, read from the calls' task records in the
transaction that sends the next turn (:mod:`agentq.lifecycle.runs`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentq.backends import Transaction
from agentq.ledger import Tables, TaskStatus

__all__ = ["call_content", "tool_messages"]


def tool_messages(tx: Transaction, turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One ``tool`` message per call of ``turn``, in the model's order."""
    calls = list(turn.get("calls") or ())
    task_ids = [str(c["task_id"]) for c in calls if c.get("task_id")]
    records = tx.get_records(Tables.TASKS, task_ids) if task_ids else {}
    out = []
    for call in calls:
        task = records.get(str(call.get("task_id"))) if call.get("task_id") else None
        out.append({"role": "tool", "tool_call_id": call.get("call_id") or "",
                    "content": call_content(call, task)})  # fmt: skip
    return out


def call_content(call: Mapping[str, Any], task: Mapping[str, Any] | None) -> str:
    """What the model is told a call came to (it reads text)."""
    if call.get("error"):
        return f"error: {call['error']}"
    if task is None:
        if call.get("task_id"):
            return "error: the task's record is gone (pruned)"
        return json.dumps(call.get("result"), default=str)
    status = task.get("status")
    if status == TaskStatus.SUCCEEDED:
        return json.dumps(task.get("result"), default=str)
    if status == TaskStatus.CANCELLED:
        return f"not run: {task.get('error') or 'cancelled'}"
    return f"error: the call failed ({status}): {task.get('error') or 'no detail'}"
