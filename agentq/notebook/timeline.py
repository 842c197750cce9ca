"""``rt.plot_timeline()``: a run as bars, one per task, from enqueue to finish.

Bars are coloured by outcome (a task not finished yet reaches to the latest time
in the ledger), and the time a task waited for a human's approval shows as its
own segment; an escalation is marked on the row of the task whose approval
escalated, and an approval's decision too. Time runs from the first enqueue, in
seconds, minutes or hours, whichever reads best. Needs matplotlib
(``pip install 'agentq-runtime[notebook]'``); the figure is returned: a notebook shows it
when it is a cell's value, a script can ``savefig`` it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentq.notebook.frame import optional_import
from agentq.notebook.html import MAX_ROWS

if TYPE_CHECKING:
    from agentq.approvals import ApprovalInfo
    from agentq.ledger import TaskInfo

__all__ = ["OUTCOME_COLOURS", "plot_timeline"]

#: Bar colour of each task status.
OUTCOME_COLOURS = {
    "succeeded": "tab:green",
    "dead": "tab:red",
    "cancelled": "tab:gray",
    "running": "tab:blue",
    "queued": "tab:purple",
    "retry_scheduled": "tab:orange",
    "awaiting_approval": "gold",
}
_LABELLED = 25  # more rows than this: numbered, not named (the figure stays small)
_UNITS = ((3 * 3600, 3600.0, "h"), (180, 60.0, "min"), (0, 1.0, "s"))


def plot_timeline(
    tasks: Sequence[TaskInfo],
    approvals: Sequence[ApprovalInfo] = (),
    *,
    title: str = "tasks from enqueue to finish",
    max_tasks: int = MAX_ROWS,
    ax: Any = None,
) -> Any:
    """Plot ``tasks`` (the first ``max_tasks`` by enqueue time) and mark the
    escalations and decisions of ``approvals``; returns the matplotlib figure."""
    figure = optional_import("matplotlib.figure")
    shown = sorted(tasks, key=lambda t: t.created_at)[:max_tasks]
    if ax is None:
        # A Figure of its own, not pyplot's: no global state, and a notebook shows it
        # once (as the cell's value), not a second time when pyplot flushes its figures.
        fig = figure.Figure(figsize=(7, 1.5 + 0.18 * min(len(shown), _LABELLED)), dpi=80)
        ax = fig.subplots()
    else:
        fig = ax.figure
    ax.set_title(title)
    ax.set_ylabel("task (tool, id)" if len(shown) <= _LABELLED else "task (in enqueue order)")
    if not shown:
        ax.set_xlabel("time since first enqueue (s)")
        ax.text(0.5, 0.5, "no tasks", ha="center", va="center", transform=ax.transAxes)
        return fig
    origin = shown[0].created_at
    latest = max(t.finished_at or t.updated_at for t in shown)
    span = (latest - origin).total_seconds()
    scale, unit = next((s, u) for limit, s, u in _UNITS if span >= limit)

    def x(when: datetime) -> float:
        return (when - origin).total_seconds() / scale

    rows = {t.task_id: i for i, t in enumerate(shown)}
    decided = {a.task_id: a.decided_at for a in approvals if a.decided_at is not None}
    minimum = span / scale / 200 or 0.005  # an instant task still shows as a sliver
    seen: set[str] = set()

    def bar(row: int, start: datetime, end: datetime, status: str) -> None:
        ax.barh(
            row, max(x(end) - x(start), minimum), left=x(start), height=0.6,
            color=OUTCOME_COLOURS.get(status, "black"),
            label=status if status not in seen else None,
        )  # fmt: skip
        seen.add(status)

    for i, t in enumerate(shown):
        start, end = t.created_at, t.finished_at or latest
        waited = decided.get(t.task_id)
        if t.kind == "action" and t.approval_id and (waited is None or waited > start):
            # The time it waited for a human, then its run to the outcome.
            bar(i, start, min(waited or end, end), "awaiting_approval")
            start = min(waited or end, end)
        if t.status != "awaiting_approval":
            bar(i, start, end, t.status.value)
    marks = {"escalated": ("v", "tab:red"), "decided": ("|", "black")}
    labelled: set[str] = set()
    for a in approvals:
        row = rows.get(a.task_id)
        if row is None:
            continue
        for what, when in (("escalated", a.escalated_at), ("decided", a.decided_at)):
            if when is None:
                continue
            marker, colour = marks[what]
            ax.plot(
                [x(when)], [row], marker=marker, color=colour, markersize=9, linestyle="",
                label=what if what not in labelled else None,
            )  # fmt: skip
            labelled.add(what)
    if len(shown) <= _LABELLED:
        ax.set_yticks(range(len(shown)), [f"{t.tool} {t.task_id[-6:]}" for t in shown])
    ax.invert_yaxis()
    ax.set_xlabel(f"time since first enqueue ({unit})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    return fig
