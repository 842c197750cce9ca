"""HTML views of tasks, approvals, runs and queue figures, for Jupyter's ``_repr_html_``.

Everything shown is escaped: a task's arguments, result and error come from an
agent (untrusted) or an external API, and markup in them must show as text, not
run. Secrets are redacted as everywhere agentq writes text (:mod:`agentq.redact`),
and a value under a secret-looking key (``password``, ``api_key``, ``token``…)
is replaced whole. Long values are cut, so a view stays readable.

This module sits below the data classes it renders (they call it from their
``_repr_html_``), so it reads them by attribute only.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self, SupportsIndex, TypeVar, overload

from agentq.redact import REDACTED, is_secret_name, redact_data, redact_text

if TYPE_CHECKING:
    from agentq.approvals import ApprovalInfo
    from agentq.backends.base import QueueStats
    from agentq.ledger import TaskInfo
    from agentq.run_info import RunInfo, TurnInfo, Usage

__all__ = [
    "ApprovalList",
    "QueueStatsList",
    "TaskList",
    "approval_html",
    "approvals_html",
    "queue_stats_html",
    "run_html",
    "safe_value",
    "task_html",
    "tasks_html",
]

T = TypeVar("T")

#: Rows shown by a list view; the rest are counted.
MAX_ROWS = 50
_CELL = 120  # characters of a value in a list's cell
_DETAIL = 2000  # characters of a value in a single task's view

_COLOURS = {
    "succeeded": "#2e7d32",
    "dead": "#c62828",
    "cancelled": "#757575",
    "running": "#1565c0",
    "queued": "#5e35b1",
    "retry_scheduled": "#ef6c00",
    "awaiting_approval": "#f9a825",
    "pending": "#f9a825",
    "escalated": "#ef6c00",
    "approved": "#2e7d32",
    "rejected": "#c62828",
    "void": "#757575",
    "expired": "#757575",
    "failed": "#c62828",
    "awaiting_tools": "#1565c0",
}
_TABLE = 'style="border-collapse:collapse;font-size:12px;text-align:left"'
_TD = 'style="border:1px solid #ddd;padding:2px 6px;vertical-align:top"'


def _masked(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: REDACTED if is_secret_name(str(k)) else _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    return value


def safe_value(value: Any) -> Any:
    """``value`` as agentq's views show it: URL secrets redacted, secret-named keys
    masked (plain data, not yet escaped)."""
    return redact_data(_masked(value))


def _text(value: Any, limit: int) -> str:
    """Escaped, redacted text of one value, cut to ``limit`` characters."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
    elif isinstance(value, str):
        text = redact_text(value)
    else:
        text = json.dumps(safe_value(value), default=str, ensure_ascii=False, sort_keys=True)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=True)


def _status(value: Any) -> str:
    name = str(getattr(value, "value", value))
    colour = _COLOURS.get(name, "#424242")
    return (
        f'<span style="color:#fff;background:{colour};border-radius:3px;padding:0 4px">'
        f"{html.escape(name)}</span>"
    )


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], total: int) -> str:
    head = "".join(f"<th {_TD}>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td {_TD}>{c}</td>" for c in row) + "</tr>" for row in rows)
    more = ""
    if total > MAX_ROWS:
        more = f"<p>… and {total - MAX_ROWS} more (first {MAX_ROWS} shown)</p>"
    return f"<table {_TABLE}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def _fields(title: str, pairs: Sequence[tuple[str, str]]) -> str:
    rows = "".join(
        f"<tr><th {_TD}>{html.escape(k)}</th><td {_TD}>{v}</td></tr>" for k, v in pairs if v
    )
    return f"<table {_TABLE}><caption>{html.escape(title)}</caption>{rows}</table>"


def task_html(task: TaskInfo) -> str:
    """One task: status, attempts, times, arguments, result and error."""
    duration = ""
    if task.finished_at is not None:
        duration = f"{(task.finished_at - task.created_at).total_seconds():.3f} s"
    return _fields(
        f"task {task.task_id}",
        [
            ("tool", _text(task.tool, _DETAIL)),
            ("kind", _text(task.kind, _DETAIL)),
            ("status", _status(task.status)),
            ("attempt", str(task.attempt)),
            ("failures", str(task.failures)),
            ("deliveries", str(task.deliveries)),
            ("created", _text(task.created_at, _DETAIL)),
            ("started", _text(task.started_at, _DETAIL)),
            ("finished", _text(task.finished_at, _DETAIL)),
            ("enqueue to finish", duration),
            ("next attempt", _text(task.next_attempt_at, _DETAIL)),
            ("approval", _text(task.approval_id, _DETAIL)),
            ("ordering key", _text(task.ordering_key, _DETAIL)),
            ("idempotency key", _text(task.idempotency_key, _DETAIL)),
            ("args", _text(task.args, _DETAIL)),
            ("result", _text(task.result, _DETAIL)),
            ("error", _text(task.error, _DETAIL)),
        ],
    )


def tasks_html(tasks: Sequence[TaskInfo]) -> str:
    """A table of tasks, one row each (the first :data:`MAX_ROWS`)."""
    rows = (
        [
            _text(t.task_id, _CELL), _text(t.tool, _CELL), _status(t.status), str(t.attempt),
            _text(t.created_at, _CELL), _text(t.finished_at, _CELL), _text(t.args, _CELL),
            _text(t.error if t.error else t.result, _CELL),
        ]
        for t in tasks[:MAX_ROWS]
    )  # fmt: skip
    header = ["task", "tool", "status", "attempt", "created", "finished", "args",
              "result / error"]  # fmt: skip
    return f"<p>{len(tasks)} task(s)</p>" + _table(header, rows, len(tasks))


def approval_html(approval: ApprovalInfo) -> str:
    """One approval request and what became of it."""
    return _fields(
        f"approval {approval.approval_id}",
        [
            ("task", _text(approval.task_id, _DETAIL)),
            ("tool", _text(approval.tool, _DETAIL)),
            ("status", _status(approval.status)),
            ("reason", _text(approval.reason, _DETAIL)),
            ("requested", _text(approval.requested_at, _DETAIL)),
            ("escalates at", _text(approval.escalate_at, _DETAIL)),
            ("escalated", _text(approval.escalated_at, _DETAIL)),
            ("decided", _text(approval.decided_at, _DETAIL)),
            ("decided by", _text(approval.decided_by, _DETAIL)),
            ("note", _text(approval.decision_note, _DETAIL)),
            ("args", _text(approval.args, _DETAIL)),
        ],
    )


def approvals_html(approvals: Sequence[ApprovalInfo]) -> str:
    """A table of approval requests."""
    rows = (
        [
            _text(a.approval_id, _CELL), _text(a.tool, _CELL), _status(a.status),
            _text(a.requested_at, _CELL), _text(a.escalated_at, _CELL),
            _text(a.decided_by, _CELL), _text(a.args, _CELL), _text(a.reason, _CELL),
        ]
        for a in approvals[:MAX_ROWS]
    )  # fmt: skip
    header = ["approval", "tool", "status", "requested", "escalated", "decided by", "args",
              "reason"]  # fmt: skip
    return f"<p>{len(approvals)} approval(s)</p>" + _table(header, rows, len(approvals))


def _tokens(usage: Usage) -> str:
    return f"{usage.prompt_tokens} / {usage.completion_tokens} / {usage.total_tokens}"


def _calls(turn: TurnInfo) -> str:
    """A turn's calls, one per line: the tool, its task (or why none) and arguments."""
    lines = []
    for call in turn.calls:
        where = call.task_id or ("local" if call.local else f"refused: {call.error}")
        lines.append(f"{_text(call.tool, _CELL)} ({_text(where, _CELL)}) {_text(call.args, _CELL)}")
    return "<br>".join(lines)


def run_html(run: RunInfo) -> str:
    """One durable agent run: its status, a table of its turns (tokens, latency,
    calls, the model's text) and its output or error. The model's text is
    untrusted like a task's arguments: escaped and redacted."""
    facts = _fields(
        f"run {run.run_id}",
        [
            ("agent", _text(run.agent, _DETAIL)),
            ("owner", _text(run.owner, _DETAIL)),
            ("status", _status(run.status)),
            ("turn", str(run.turn)),
            ("tokens (prompt / completion / total)", _tokens(run.usage)),
            ("created", _text(run.created_at, _DETAIL)),
            ("updated", _text(run.updated_at, _DETAIL)),
            ("input", _text(run.input, _DETAIL)),
            ("waiting on", _text(", ".join(run.pending), _DETAIL)),
            ("output", _text(run.output, _DETAIL)),
            ("error", _text(run.error, _DETAIL)),
        ],
    )
    rows = (
        [
            str(t.number), _text(t.model, _CELL), _tokens(t.usage),
            "" if t.latency_ms is None else f"{t.latency_ms:.0f} ms", _calls(t),
            _text(t.content, _CELL),
        ]
        for t in run.turns[:MAX_ROWS]
    )  # fmt: skip
    header = ["turn", "model", "tokens (prompt / completion / total)", "latency", "calls", "text"]
    return facts + _table(header, rows, len(run.turns))


def queue_stats_html(stats: Sequence[QueueStats]) -> str:
    """A table of queue figures; a backend that cannot tell shows a dash."""

    def cell(v: int | float | None) -> str:
        if v is None:
            return "-"
        return f"{v:.1f} s" if isinstance(v, float) else str(v)

    rows = (
        [
            _text(s.queue, _CELL), cell(s.depth), cell(s.ready), cell(s.scheduled),
            cell(s.leased), cell(s.backing_off), cell(s.oldest_unacked_age),
            cell(s.lease_expirations),
        ]
        for s in stats[:MAX_ROWS]
    )  # fmt: skip
    header = ["queue", "depth", "ready", "scheduled", "leased", "backing off",
              "oldest unacked", "lease expirations"]  # fmt: skip
    return _table(header, rows, len(stats))


class _Shown(list[T]):
    """A list whose slices are lists of the same kind (so they show as tables too)."""

    @overload
    def __getitem__(self, index: SupportsIndex) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Self: ...
    def __getitem__(self, index: SupportsIndex | slice) -> T | Self:
        if isinstance(index, slice):
            return type(self)(super().__getitem__(index))
        return super().__getitem__(index)


class TaskList(_Shown["TaskInfo"]):
    """A list of tasks that shows as a table in a notebook."""

    def _repr_html_(self) -> str:
        return tasks_html(self)


class ApprovalList(_Shown["ApprovalInfo"]):
    """A list of approval requests that shows as a table in a notebook."""

    def _repr_html_(self) -> str:
        return approvals_html(self)


class QueueStatsList(_Shown["QueueStats"]):
    """Figures of several queues that show as a table in a notebook."""

    def _repr_html_(self) -> str:
        return queue_stats_html(self)
