"""What every framework adapter shares: the idempotency key of a model's tool
call, enqueueing it, waiting a bounded time, and what the model is told.

A call's key is derived, by default, from the conversation (or run) and the
framework's tool-call id: the framework re-running the same call (a resumed
run, a retried step) finds the task that call created and never creates a
second. Some providers mint a new call id when the model is asked again; with
``key_mode="args"`` the key is the conversation and a digest of the tool and its
validated arguments instead, so the same refund asked twice in one conversation
is one task (and a deliberate second identical call needs a new conversation).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from agentq.errors import ConfigError
from agentq.idempotency import args_digest
from agentq.ledger import TaskInfo, TaskStatus
from agentq.runtime import Runtime

__all__ = ["MAX_WAIT_SECONDS", "KeyMode", "call_key", "check_wait", "enqueue_and_wait", "outcome"]

KeyMode = Literal["call_id", "args"]
"""How a model tool call's idempotency key is made: ``"call_id"`` from the
conversation and the framework's tool-call id, ``"args"`` from the conversation
and a digest of the tool and its validated arguments (for providers that mint
new call ids when the model is asked again)."""

MAX_WAIT_SECONDS = 300.0
"""The longest an adapter's tool call may block its agent waiting for a task."""


def check_wait(wait_seconds: float) -> float:
    """A tool call's wait bound, checked."""
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise ConfigError(f"wait_seconds must be between 0 and {MAX_WAIT_SECONDS:g}")
    return float(wait_seconds)


def call_key(
    rt: Runtime,
    framework: str,
    tool: str,
    args: Mapping[str, Any],
    *,
    conversation: str,
    call_id: str | None,
    mode: KeyMode = "call_id",
) -> str:
    """The idempotency key of one model tool call.

    Without a call id (a tool invoked directly, not by a model) the args digest
    is used whatever ``mode`` says. Components are hashed, so no id can contain
    a separator that makes two calls' keys collide.
    """
    if mode not in ("call_id", "args"):
        raise ConfigError(f"key_mode must be 'call_id' or 'args', not {mode!r}")
    if mode == "args" or not call_id:
        validated = rt.tools.get(tool).enqueueable_args(args)
        part, kind = args_digest(tool, validated), "args"
    else:
        part, kind = call_id, "call"
    digest = hashlib.sha256(f"{conversation}\0{tool}\0{part}".encode()).hexdigest()
    return f"{framework}:{kind}:{digest}"


async def enqueue_and_wait(
    rt: Runtime, tool: str, args: Mapping[str, Any], key: str, wait_seconds: float
) -> TaskInfo:
    """Enqueue (or find) the call's task; wait up to ``wait_seconds`` for it unless it
    awaits approval (nobody is deciding within a tool call). No ``reason``: a model's
    tool call gives none, and approvers read a task's reason as why it was asked."""
    info = await rt.aenqueue_action(tool, dict(args), idempotency_key=key)
    if info.done or info.status is TaskStatus.AWAITING_APPROVAL or wait_seconds <= 0:
        return info
    return await rt.wait_async(info.task_id, wait_seconds)


def outcome(info: TaskInfo) -> dict[str, Any]:
    """What the model is told of a task."""
    out: dict[str, Any] = {"task_id": info.task_id, "status": info.status.value}
    if info.status is TaskStatus.SUCCEEDED:
        out["result"] = info.result
    elif info.status is TaskStatus.AWAITING_APPROVAL:
        out["approval_id"] = info.approval_id
        out["note"] = "awaiting a human's approval in agentq: nothing has run"
    elif info.done:
        out["error"] = info.error or info.status.value
    else:
        out["note"] = "still running: its result comes later"
    return out
