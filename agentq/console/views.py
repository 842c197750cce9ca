"""What each console page shows, read from a :class:`~agentq.runtime.Runtime`.

Plain functions returning plain data, no web framework: the routes render
them. Everything that reaches a page passes through :func:`shown`, which
redacts URL credentials (:mod:`agentq.redact`) and masks the values of keys
that name a secret (``api_key``, ``password``...), because task arguments and
results are untrusted agent data that may carry them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agentq import overview
from agentq.approvals import ApprovalStatus
from agentq.ledger import Tables, TaskInfo, TaskStatus
from agentq.lifecycle.tasks import LOCAL, RUNTIME
from agentq.redact import REDACTED, is_secret_name, redact_data, redact_text
from agentq.runtime import Runtime
from agentq.server import access
from agentq.server.auth import Principal, Scope

#: The statuses of an approval that waits for a decision, and of a decided one.
OPEN_STATUSES = (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED)
DECIDED_STATUSES = tuple(s for s in ApprovalStatus if s not in OPEN_STATUSES)

__all__ = [
    "approval_inbox",
    "compact",
    "dead_letter_rows",
    "pretty",
    "queue_figures",
    "shown",
    "status_counts",
    "task_detail",
    "task_rows",
    "trace_id",
]

#: Most tasks a list page shows (newest first); the filters narrow it down.
TASK_PAGE = 200
#: Most decided approvals the inbox shows under the open ones.
DECIDED_SHOWN = 50
#: Longest search text accepted (longer is cut).
SEARCH_CHARS = 200
#: Most tasks a searching page looks at (the next page goes on from there).
SEARCH_SCAN = 2000
#: Most open approvals the inbox shows (longest waiting first).
OPEN_SHOWN = 200
#: Dead-letter entries a page shows (newest first).
DEAD_LETTER_PAGE = 200
#: Audit entries a page shows (newest first).
AUDIT_PAGE = 200


def shown(value: Any) -> Any:
    """``value`` as a page may show it: redacted, secret-named keys masked."""
    if isinstance(value, Mapping):
        return {
            redact_text(str(k)): REDACTED if is_secret_name(str(k)) else shown(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [shown(v) for v in value]
    return redact_data(value)


def pretty(value: Any) -> str:
    """Indented JSON of a shown value (the template escapes it)."""
    return json.dumps(shown(value), indent=2, sort_keys=True, default=str, ensure_ascii=False)


def compact(value: Any, chars: int = 120) -> str:
    """One-line JSON of a shown value, cut to ``chars`` characters (for lists)."""
    text = json.dumps(shown(value), sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def trace_id(record: Mapping[str, Any]) -> str | None:
    """The W3C trace id carried by a task (from its ``traceparent``), if any."""
    carrier = record.get("trace")
    parent = carrier.get("traceparent") if isinstance(carrier, Mapping) else None
    parts = parent.split("-") if isinstance(parent, str) else []
    if len(parts) == 4 and len(parts[1]) == 32 and parts[1] != "0" * 32:
        return parts[1]
    return None


def queue_figures(rt: Runtime) -> list[dict[str, Any]]:
    """Depth, ready, scheduled, leased and oldest unacked age of every queue."""
    rows = []
    for name in rt.backend.queues():
        stats = rt.backend.stats(name)
        rows.append(
            {
                "queue": stats.queue,
                "depth": stats.depth,
                "ready": stats.ready,
                "scheduled": stats.scheduled,
                "leased": stats.leased,
                "oldest": stats.oldest_unacked_age,
            }
        )
    return rows


def status_counts(rt: Runtime, principal: Principal) -> dict[str, int]:
    """How many tasks ``principal`` may see are in each status (every status
    listed, zeros included), from the backend's indexes and totals
    (:func:`agentq.overview.status_counts`: never the finished tasks). For
    those who see all, every task (the runtime's own too); for others, the
    tasks they created (``created_by``: all of the callers' kind, not the
    runtime's), through the owner's index and count
    (:mod:`agentq.backends.owners`)."""
    counts = {s.value: 0 for s in TaskStatus}
    if access.sees_all(principal):
        owner = None
    elif principal.name in (LOCAL, RUNTIME):
        # A record without ``created_by`` (an early release's) reads as "local",
        # and the runtime's own tasks are "runtime"'s: neither is in the owner
        # index, so such a principal's tasks are read and checked one by one.
        for t in access.visible_tasks(principal, rt.tasks(), internal=True):
            counts[t.status.value] += 1
        return counts
    else:
        owner = principal.name
    for status, n in overview.status_counts(rt.backend, owner).items():
        try:
            counts[TaskStatus(status).value] += n  # "failed": retry_scheduled
        except ValueError:
            continue  # not a status this version knows
    return counts


def _matches(task: TaskInfo, needle: str) -> bool:
    fields = (task.task_id, task.tool, task.error or "", task.approval_id or "",
              task.idempotency_key or "", task.ordering_key or "",
              json.dumps(task.args, default=str, ensure_ascii=False))  # fmt: skip
    return any(needle in f.lower() for f in fields)


def task_rows(
    rt: Runtime,
    *,
    status: str = "",
    tool: str = "",
    search: str = "",
    limit: int = TASK_PAGE,
    principal: Principal | None = None,
    internal: bool = True,
    after: str | None = None,
) -> tuple[list[TaskInfo], str | None]:
    """A page of the tasks matching the filters, newest first, at most ``limit``;
    and the cursor of the next page (``None`` after the last).

    Status, tool and what ``principal`` may see (:mod:`agentq.server.access`)
    are part of the query: the page reads what it shows, not the ledger.
    ``search`` matches (case-insensitively) the id, tool, error, approval id,
    keys and the arguments' JSON text; it is checked here, over at most
    :data:`SEARCH_SCAN` tasks a page (the cursor then goes on from the last one
    looked at). ``internal=False`` leaves out the runtime's own tasks (timers,
    notices, webhooks). An unknown ``status`` raises ValueError.
    """
    wanted = TaskStatus(status) if status else None
    sees_all = principal is None or access.sees_all(principal)
    query: dict[str, Any] = {"tool": tool or None, "newest_first": True,
             "kinds": None if sees_all and internal else ("action",),
             "owner": None if sees_all or principal is None else principal.name}  # fmt: skip
    needle = search.strip().lower()[:SEARCH_CHARS]
    if not needle:
        page = rt.task_page(wanted, limit=limit, after=after, **query)
        shown = page.tasks
        if principal is not None:
            shown = access.visible_tasks(principal, shown, internal=internal)
        return shown, page.next_after
    found, cursor = _search(rt, needle, wanted, query, limit, after)
    if principal is not None:
        found = access.visible_tasks(principal, found, internal=internal)
    return found, cursor


def _search(
    rt: Runtime, needle: str, status: TaskStatus | None, query: dict[str, Any], limit: int,
    after: str | None,
) -> tuple[list[TaskInfo], str | None]:  # fmt: skip
    """Up to ``limit`` tasks matching ``needle`` among the next :data:`SEARCH_SCAN`
    after ``after``; and where the next page goes on (``None``: the ledger's end)."""
    found: list[TaskInfo] = []
    cursor, looked = after, 0
    while True:
        page = rt.task_page(status, limit=min(SEARCH_SCAN - looked, 500), after=cursor, **query)
        for task in page.tasks:
            looked += 1
            cursor = task.task_id
            if _matches(task, needle):
                found.append(task)
                if len(found) == limit:
                    return found, cursor
        if page.next_after is None:
            return found, None
        if looked >= SEARCH_SCAN:
            return found, cursor


def task_detail(rt: Runtime, task_id: str, principal: Principal | None = None) -> dict[str, Any]:
    """One task with what its page shows (TaskNotFound if there is none, or if
    ``principal`` may not see it)."""
    task = rt.task(task_id) if principal is None else access.task_for(
        rt, principal, task_id, internal=True
    )
    raw = rt.backend.get_record(Tables.TASKS, task_id) or {}
    approval = rt.approval(task.approval_id) if task.approval_id else None
    dead = rt.backend.get_record(Tables.DEAD_LETTERS, task_id)
    tb = raw.get("traceback") or (dead or {}).get("traceback")
    return {
        "task": task,
        "args": pretty(task.args),
        "result": None if task.result is None else pretty(task.result),
        "error": redact_text(task.error) if task.error else None,
        "traceback": redact_text(str(tb)) if tb else None,
        "trace_id": trace_id(raw),
        "throttles": raw.get("throttles", 0),
        "queue": raw.get("queue"),
        "approval": approval,
        "dead_letter": dead is not None,
        "cancellable": principal is None or access.may_cancel_task(principal, task),
        "audit": rt.audit_log(target=task_id),
    }


def approval_inbox(
    rt: Runtime, principal: Principal | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Open approvals (pending or escalated), longest waiting first; and the
    most recently requested decided ones, the latest decision first (with
    ``principal``, those it may see). Each is one page of the statuses asked
    for (:data:`OPEN_SHOWN`, :data:`DECIDED_SHOWN`): never every approval."""
    # A principal that neither sees all nor approves sees only its own: in the query.
    own = principal is not None and not (
        access.sees_all(principal) or principal.may(Scope.APPROVE)
    )
    owner = principal.name if own and principal is not None else None
    open_ = rt.approval_page(OPEN_STATUSES, limit=OPEN_SHOWN, owner=owner).approvals
    decided = rt.approval_page(DECIDED_STATUSES, limit=DECIDED_SHOWN, newest_first=True,
                               owner=owner).approvals  # fmt: skip
    if principal is not None:
        open_ = access.visible_approvals(rt, principal, open_)
        decided = access.visible_approvals(rt, principal, decided)
    far_past = datetime.min.replace(tzinfo=UTC)
    open_.sort(key=lambda a: a.requested_at)  # key order is creation order but on Spanner
    decided.sort(key=lambda a: a.decided_at or far_past, reverse=True)
    return (
        [{"approval": a, "args": pretty(a.args)} for a in open_],
        [{"approval": a, "args": pretty(a.args)} for a in decided],
    )


def dead_letter_rows(
    rt: Runtime, after: str | None = None, limit: int = DEAD_LETTER_PAGE
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of dead-letter entries, newest first, shown redacted; and the
    cursor of the next page (None after the last)."""
    rows = []
    entries, next_after = rt.dead_letter_page(limit, after)
    for entry in entries:
        rows.append(
            {
                "entry_id": str(entry["entry_id"]),
                "stray": bool(entry.get("stray")),
                "task_id": entry.get("task_id"),
                "tool": entry.get("tool"),
                "queue": entry.get("queue"),
                "attempt": entry.get("attempt"),
                "error": redact_text(str(entry.get("error") or "")),
                "dead_at": str(entry.get("dead_at") or ""),
                "args": pretty(entry.get("args")) if entry.get("args") is not None else None,
            }
        )
    rows.sort(key=lambda r: str(r["dead_at"]), reverse=True)
    return rows, next_after
