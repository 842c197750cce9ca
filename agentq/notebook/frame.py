"""``rt.tasks_frame()``: the ledger as a pandas DataFrame
(``pip install 'agentq-runtime[notebook]'``).

One row per task, indexed by task id, with its times as timezone-aware
timestamps and ``seconds`` from enqueue to finish. Arguments, results and errors
are shown as agentq shows them everywhere (:func:`agentq.notebook.html.safe_value`:
URL secrets redacted, secret-named keys masked).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentq.errors import MissingExtra, install_hint
from agentq.notebook.html import safe_value
from agentq.redact import redact_text

if TYPE_CHECKING:
    from agentq.ledger import TaskInfo

__all__ = ["COLUMNS", "optional_import", "tasks_frame"]

COLUMNS = (
    "tool", "kind", "status", "attempt", "failures", "deliveries", "created_at",
    "started_at", "finished_at", "seconds", "next_attempt_at", "approval_id",
    "ordering_key", "idempotency_key", "args", "result", "error",
)  # fmt: skip


def optional_import(module: str, extra: str = "notebook") -> Any:
    """Import an optional dependency, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{module} is not installed: {install_hint(extra)}") from exc


def tasks_frame(tasks: Sequence[TaskInfo]) -> Any:
    """A ``pandas.DataFrame`` of ``tasks`` (columns: :data:`COLUMNS`)."""
    pd = optional_import("pandas")
    rows = []
    for t in tasks:
        seconds = None
        if t.finished_at is not None:
            seconds = (t.finished_at - t.created_at).total_seconds()
        rows.append({
            "task_id": t.task_id, "tool": t.tool, "kind": t.kind, "status": t.status.value,
            "attempt": t.attempt, "failures": t.failures, "deliveries": t.deliveries,
            "created_at": t.created_at, "started_at": t.started_at,
            "finished_at": t.finished_at, "seconds": seconds,
            "next_attempt_at": t.next_attempt_at, "approval_id": t.approval_id,
            "ordering_key": t.ordering_key, "idempotency_key": t.idempotency_key,
            "args": safe_value(t.args), "result": safe_value(t.result),
            "error": redact_text(t.error) if t.error else None,
        })  # fmt: skip
    frame = pd.DataFrame(rows, columns=["task_id", *COLUMNS])
    for column in ("created_at", "started_at", "finished_at", "next_attempt_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame.set_index("task_id")
