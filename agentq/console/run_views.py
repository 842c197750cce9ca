"""What the console's run pages show: the runs list, a run's timeline, and the
conversation behind an approval of a run's call.

Plain functions over a :class:`~agentq.runtime.Runtime` that give plain data,
like :mod:`~agentq.console.views`. A run's messages, the model's text and its
calls' arguments are untrusted (the model wrote them, or a tool returned
them): they are redacted here (:mod:`agentq.redact`) and escaped by the
templates, like task arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from agentq.agents import TURN_TOOL_PREFIX
from agentq.approvals import ApprovalInfo
from agentq.console import panels, views
from agentq.errors import ApprovalNotFound, TaskNotFound
from agentq.ledger import Tables, TaskInfo
from agentq.redact import redact_text
from agentq.run_info import CallInfo, RunInfo, RunStatus, TurnInfo
from agentq.runtime import Runtime
from agentq.server import access
from agentq.server.auth import Principal

__all__ = [
    "RUN_PAGE",
    "agent_names",
    "approval_conversations",
    "conversation",
    "run_detail",
    "run_rows",
]

#: Most runs a list page shows (newest first); "older runs" goes on from there.
RUN_PAGE = 50
#: Longest text of one message a page shows (the rest is cut, and said so).
MESSAGE_CHARS = 20_000


def agent_names(rt: Runtime) -> list[str]:
    """The agents a run can be of: those the runtime defines, and those whose
    turn tool the database's catalog knows (a console needs no agent's code)."""
    turns = [t.name for t in rt.known_tools() if t.name.startswith(TURN_TOOL_PREFIX)]
    return sorted(set(rt.agents) | {name.removeprefix(TURN_TOOL_PREFIX) for name in turns})


def run_rows(
    rt: Runtime,
    *,
    status: str = "",
    agent: str = "",
    principal: Principal | None = None,
    after: str | None = None,
    limit: int | None = None,
) -> tuple[list[RunInfo], str | None]:
    """A page of the runs matching the filters, newest first; and the cursor of
    the next page (``None`` after the last). The owner (a principal that does
    not see everyone's) is part of the query, as for tasks; ``limit`` defaults
    to :data:`RUN_PAGE`. An unknown ``status`` raises ValueError."""
    limit = limit or RUN_PAGE
    wanted = RunStatus(status) if status else None
    own = principal is not None and not access.sees_all(principal)
    owner = principal.name if own and principal is not None else None
    found = rt.runs(wanted, agent=agent or None, owner=owner, limit=limit + 1, after=after or "")
    if principal is not None:
        found = [r for r in found if access.may_see_run(principal, r)]
    if len(found) > limit:
        return found[:limit], found[limit - 1].run_id
    return found, None


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = redact_text(text)
    if len(text) > MESSAGE_CHARS:
        return text[:MESSAGE_CHARS] + f"… ({len(text) - MESSAGE_CHARS} more characters)"
    return text


def _arguments(raw: Any) -> str:
    """A call's arguments as the model sent them (JSON text), shown as
    :func:`views.pretty` shows task arguments; text that is not JSON, redacted."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return _text(raw)
    return views.pretty(raw)


def conversation(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages of a run as a page shows them: the role, the text (redacted),
    and an assistant's calls (tool name and arguments)."""
    out = []
    for message in messages:
        calls = []
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            function = function if isinstance(function, Mapping) else {}
            calls.append({
                "tool": _text(function.get("name") or "?"),
                "args": _arguments(function.get("arguments")),
                "this": False,  # the call an approval is about (approval_conversations)
            })  # fmt: skip
        content = message.get("content")
        out.append({"role": str(message.get("role") or "?"),
                    "text": "" if content is None else _text(content), "calls": calls})  # fmt: skip
    return out


def _task(rt: Runtime, task_id: str | None) -> TaskInfo | None:
    if not task_id:
        return None
    try:
        return rt.task(task_id)
    except TaskNotFound:
        return None  # pruned


def _approval(rt: Runtime, task: TaskInfo | None) -> ApprovalInfo | None:
    if task is None or not task.approval_id:
        return None
    try:
        return rt.approval(task.approval_id)
    except ApprovalNotFound:
        return None


def _call(rt: Runtime, call: CallInfo, sees_timers: bool) -> dict[str, Any]:
    task = _task(rt, call.task_id)
    approval = _approval(rt, task)
    result = call.result if call.local else (task.result if task is not None else None)
    error = call.error or (task.error if task is not None else None)
    return {
        "call": call,
        "args": views.pretty(call.args),
        "task": task,
        "approval": approval,
        "timers": panels.approval_timers(rt, approval) if approval and sees_timers else [],
        "result": None if result is None else views.pretty(result),
        "error": redact_text(error) if error else None,
    }


def _turn(
    rt: Runtime, run: RunInfo, turn: TurnInfo, seen: int, sees_timers: bool
) -> dict[str, Any]:
    # What the user wrote since the last turn was asked (its first message, or a
    # message sent after the run answered).
    asked = [m for m in run.messages[seen : turn.messages_sent] if m.get("role") == "user"]
    return {
        "turn": turn,
        "asked": [_text(m.get("content") or "") for m in asked],
        "content": _text(turn.content) if turn.content else None,
        "calls": [_call(rt, c, sees_timers) for c in turn.calls],
    }


def run_detail(rt: Runtime, run_id: str, principal: Principal | None = None) -> dict[str, Any]:
    """One run with what its page shows: every committed turn (the user's words
    that led to it, the model's text, tokens and latency, each call with its
    task, approval, timers and outcome), and the turn queued or running.
    :class:`~agentq.errors.RunNotFound` if there is none, or if ``principal``
    may not see it."""
    run = rt.run(run_id) if principal is None else access.run_for(rt, principal, run_id)
    sees_timers = principal is None or access.sees_all(principal)
    turns, seen = [], 0
    for turn in run.turns:
        turns.append(_turn(rt, run, turn, seen, sees_timers))
        seen = turn.messages_sent
    later = run.messages[seen:] if run.turn_task_id else []
    waiting = [m for m in later if m.get("role") == "user"]
    return {
        "run": run,
        "timeline": turns,
        "next_turn": _task(rt, run.turn_task_id),
        "next_asked": [_text(m.get("content") or "") for m in waiting],
        "output": _text(run.output) if run.output else None,
        "error": redact_text(run.error) if run.error else None,
        "cancellable": not run.done and (principal is None or access.sees_all(principal)),
    }


def _read(rt: Runtime, table: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """Several records in one read (outside a transaction); missing ones left out."""
    found = rt.backend.read_records(table, keys) if keys else {}
    return {key: stored.value for key, stored in found.items()}


def approval_conversations(rt: Runtime, approvals: Iterable[ApprovalInfo]) -> dict[str, Any]:
    """For each approval whose task is a call of a run (its record's ``run``
    tag), the conversation that led to the call: the run's messages up to and
    including the model's answer of that turn. Keyed by approval id; two reads
    however many approvals (their tasks, then their runs)."""
    wanted = {a.approval_id: a.task_id for a in approvals}
    tasks = _read(rt, Tables.TASKS, list(dict.fromkeys(wanted.values())))
    tags: dict[str, Mapping[str, Any]] = {}
    for aid, tid in wanted.items():
        tag = (tasks.get(tid) or {}).get("run")
        if isinstance(tag, Mapping) and tag.get("role") == "call":
            tags[aid] = tag
    run_ids = list(dict.fromkeys(str(t.get("run_id")) for t in tags.values()))
    runs = _read(rt, Tables.RUNS, run_ids)
    out: dict[str, Any] = {}
    for aid, tag in tags.items():
        rec = runs.get(str(tag.get("run_id")))
        if rec is None:
            continue  # pruned
        run = RunInfo.model_validate(rec)
        turn = next((t for t in run.turns if t.number == int(tag.get("turn", -1))), None)
        if turn is None:
            continue
        shown = conversation(run.messages[: turn.messages_sent + 1])
        position = int(tag.get("position", -1))
        if shown and 0 <= position < len(shown[-1]["calls"]):
            shown[-1]["calls"][position]["this"] = True
        out[aid] = {"run": run, "turn": turn.number, "messages": shown}
    return out
