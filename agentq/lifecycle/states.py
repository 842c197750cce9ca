"""The legal moves of a task and of an approval, written once.

Every change of a task's or an approval's status is an *event* checked here
against the state the record is in, read inside the transaction that applies
it. An event the state does not allow raises :class:`IllegalTransition` (for
approvals :class:`ApprovalError`) naming the record, its state and the event,
and nothing of that transaction commits.

``NEW`` stands for "no record yet": only the creating events start from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from agentq.approvals import ApprovalStatus
from agentq.errors import ApprovalError, IllegalTransition
from agentq.ledger import TaskStatus

__all__ = [
    "APPROVAL_TRANSITIONS",
    "NEW",
    "TASK_TRANSITIONS",
    "Event",
    "approval_table_markdown",
    "next_approval_state",
    "next_task_state",
    "task_table_markdown",
]

#: The "state" of a record that does not exist yet.
NEW: Final = "new"


class Event(StrEnum):
    """What can happen to a task or an approval."""

    ENQUEUE = "enqueue"  # a call to run as soon as possible
    SCHEDULE = "schedule"  # a call (or a timer) to run at a given time
    REQUEST_APPROVAL = "request_approval"  # a call that waits for a human
    APPROVE = "approve"  # a human said yes: the call is sent (at its scheduled time)
    REJECT = "reject"  # a human said no: the call will never run
    CANCEL = "cancel"  # the caller withdrew the call (voids its approval)
    CLAIM = "claim"  # a worker leased a delivery and starts running it
    SUCCEED = "succeed"  # the handler's result and the ack committed
    RETRY = "retry"  # the attempt failed; the next one is scheduled with backoff
    THROTTLE = "throttle"  # a 429/503 with Retry-After: run again then, not a failure
    DEFER = "defer"  # not run yet (a hold on the tool, its rate limit): its turn is later
    CHECKPOINT = "checkpoint"  # long work paused: ack + re-send for later
    FAIL = "fail"  # the attempt failed for good (permanent error, attempts used up)
    DEAD_LETTER = "dead_letter"  # refused before running (poison, unknown tool, policy)
    REPLAY = "replay"  # an operator sends a dead task again, with fresh attempts
    ESCALATE = "escalate"  # nobody decided in time: the approval escalates
    EXPIRE = "expire"  # nobody decided before the approval's deadline: the call is void
    AUTO_REJECT = "auto_reject"  # nobody decided in time and the rule says no: never runs


_T = TaskStatus
_E = Event

#: (state, event) -> next state, for tasks. Anything absent is illegal.
TASK_TRANSITIONS: Final[dict[tuple[str, Event], TaskStatus]] = {
    (NEW, _E.ENQUEUE): _T.QUEUED,
    (NEW, _E.SCHEDULE): _T.QUEUED,
    (NEW, _E.REQUEST_APPROVAL): _T.AWAITING_APPROVAL,
    (_T.AWAITING_APPROVAL, _E.APPROVE): _T.QUEUED,
    (_T.AWAITING_APPROVAL, _E.REJECT): _T.CANCELLED,
    (_T.AWAITING_APPROVAL, _E.CANCEL): _T.CANCELLED,
    (_T.AWAITING_APPROVAL, _E.EXPIRE): _T.CANCELLED,
    (_T.AWAITING_APPROVAL, _E.AUTO_REJECT): _T.CANCELLED,
    (_T.QUEUED, _E.CLAIM): _T.RUNNING,
    (_T.QUEUED, _E.DEFER): _T.QUEUED,
    (_T.QUEUED, _E.CANCEL): _T.CANCELLED,
    (_T.QUEUED, _E.DEAD_LETTER): _T.DEAD,
    (_T.RUNNING, _E.CLAIM): _T.RUNNING,  # redelivered after a crash or a lost lease
    (_T.RUNNING, _E.SUCCEED): _T.SUCCEEDED,
    (_T.RUNNING, _E.RETRY): _T.RETRY_SCHEDULED,
    (_T.RUNNING, _E.THROTTLE): _T.RETRY_SCHEDULED,
    (_T.RUNNING, _E.DEFER): _T.QUEUED,  # only for its first delivery: see tasks.defer
    (_T.RUNNING, _E.CHECKPOINT): _T.QUEUED,
    (_T.RUNNING, _E.FAIL): _T.DEAD,
    (_T.RUNNING, _E.DEAD_LETTER): _T.DEAD,
    (_T.RUNNING, _E.CANCEL): _T.CANCELLED,
    (_T.RETRY_SCHEDULED, _E.CLAIM): _T.RUNNING,
    (_T.RETRY_SCHEDULED, _E.DEFER): _T.RETRY_SCHEDULED,
    (_T.RETRY_SCHEDULED, _E.CANCEL): _T.CANCELLED,
    (_T.RETRY_SCHEDULED, _E.DEAD_LETTER): _T.DEAD,
    (_T.DEAD, _E.REPLAY): _T.QUEUED,
}

_A = ApprovalStatus

#: (state, event) -> next state, for approvals. Anything absent is illegal.
APPROVAL_TRANSITIONS: Final[dict[tuple[str, Event], ApprovalStatus]] = {
    (NEW, _E.REQUEST_APPROVAL): _A.PENDING,
    (_A.PENDING, _E.APPROVE): _A.APPROVED,
    (_A.PENDING, _E.REJECT): _A.REJECTED,
    (_A.PENDING, _E.ESCALATE): _A.ESCALATED,
    (_A.PENDING, _E.CANCEL): _A.VOID,
    (_A.PENDING, _E.EXPIRE): _A.EXPIRED,
    (_A.PENDING, _E.AUTO_REJECT): _A.AUTO_REJECTED,
    (_A.ESCALATED, _E.APPROVE): _A.APPROVED,
    (_A.ESCALATED, _E.REJECT): _A.REJECTED,
    (_A.ESCALATED, _E.ESCALATE): _A.ESCALATED,  # to the next level
    (_A.ESCALATED, _E.CANCEL): _A.VOID,
    (_A.ESCALATED, _E.EXPIRE): _A.EXPIRED,
    (_A.ESCALATED, _E.AUTO_REJECT): _A.AUTO_REJECTED,
}

_MEANING: Final[dict[str, str]] = {
    NEW: "no record yet",
    _T.AWAITING_APPROVAL: "waits for a human; no queue message",
    _T.QUEUED: "a message is ready or scheduled (or it waits behind its ordering key)",
    _T.RUNNING: "a worker holds a lease and runs the handler",
    _T.RETRY_SCHEDULED: "the last attempt failed or was throttled; the next is scheduled",
    _T.SUCCEEDED: "final: result recorded",
    _T.DEAD: "final until replayed: in the dead-letter queue with its error",
    _T.CANCELLED: "final: cancelled, rejected, auto-rejected or expired; never runs again",
}


def next_task_state(task_id: str, state: str | None, event: Event) -> TaskStatus:
    """The state ``event`` moves task ``task_id`` to, or :class:`IllegalTransition`."""
    current = NEW if state is None else str(state)
    nxt = TASK_TRANSITIONS.get((current, event))
    if nxt is None:
        raise IllegalTransition(
            f"task {task_id!r} is {current}: {event} is not allowed "
            f"(allowed: {_allowed(TASK_TRANSITIONS, current)})"
        )
    return nxt


def next_approval_state(
    approval_id: str, state: str | None, event: Event, detail: str = ""
) -> ApprovalStatus:
    """The state ``event`` moves approval ``approval_id`` to, or :class:`ApprovalError`."""
    current = NEW if state is None else str(state)
    nxt = APPROVAL_TRANSITIONS.get((current, event))
    if nxt is None:
        allowed = _allowed(APPROVAL_TRANSITIONS, current)
        was = "is" if allowed != _FINAL else "was already"
        raise ApprovalError(
            f"approval {approval_id!r} {was} {current}{detail}: {event} is not allowed "
            f"(allowed: {allowed})"
        )
    return nxt


_FINAL = "nothing: it is final"


def _allowed(table: Mapping[tuple[str, Event], StrEnum], state: str) -> str:
    events = [str(e) for (s, e) in table if s == state]
    return ", ".join(events) or _FINAL


def _moves(table: Mapping[tuple[str, Event], StrEnum], state: str) -> str:
    return ", ".join(f"{e} → {n}" for (s, e), n in table.items() if s == state) or "—"


def task_table_markdown() -> str:
    """The task transition table as Markdown (the README prints exactly this)."""
    rows = ["| state | meaning | event → next state |", "| --- | --- | --- |"]
    for state in [NEW, *map(str, TaskStatus)]:
        rows.append(f"| `{state}` | {_MEANING[state]} | {_moves(TASK_TRANSITIONS, state)} |")
    return "\n".join(rows)


def approval_table_markdown() -> str:
    """The approval transition table as Markdown (the README prints exactly this)."""
    rows = ["| approval state | event → next state |", "| --- | --- |"]
    for state in [NEW, *map(str, ApprovalStatus)]:
        rows.append(f"| `{state}` | {_moves(APPROVAL_TRANSITIONS, state)} |")
    return "\n".join(rows)
