"""The world of the lifecycle model test: status meanings, the tool and its counters.

Kept apart from the state machine (``test_lifecycle_model.py``) so each file reads in
one sitting.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from agentq import Runtime, ToolContext, tool
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.policies import ApprovalRule, Defaults, Policy

# -- statuses, by meaning (one line each to follow a rename) -------------------------


def is_final(status: str) -> bool:
    """Nothing more will happen to the task."""
    return TaskStatus(status) in TERMINAL


def is_dead(status: str) -> bool:
    """agentq gave up on the task (it is in the dead-letter queue)."""
    return TaskStatus(status) == TaskStatus.DEAD


def waits_for_human(status: str) -> bool:
    """The task waits for an approval decision (it has no queue message)."""
    return TaskStatus(status) == TaskStatus.AWAITING_APPROVAL


def holds_message(status: str) -> bool:
    """The task is live in its queue: exactly one message of it exists."""
    return not is_final(status) and not waits_for_human(status)


# -- the tool ---------------------------------------------------------------------------

QUEUE = "model"
LOCK = threading.Lock()
CALLS: defaultdict[str, list[datetime]] = defaultdict(list)  # task id -> fake times it ran
FAILING: Counter[str] = Counter()  # task id -> how many of its next runs fail
FAILED: Counter[str] = Counter()  # task id -> runs that failed


class ChargeArgs(BaseModel):
    n: int
    amount: float


class Charged(BaseModel):
    n: int


@tool(queue=QUEUE, max_attempts=2)
def charge(ctx: ToolContext, args: ChargeArgs) -> Charged:
    with LOCK:
        CALLS[ctx.task_id].append(ctx.clock.now())
        fail = FAILING[ctx.task_id] > 0
        FAILING[ctx.task_id] -= fail
        FAILED[ctx.task_id] += fail
    if fail:
        raise RuntimeError("told to fail")
    ctx.on_commit(lambda tx: tx.execute("INSERT INTO effects VALUES (?)", (ctx.task_id,)))
    return Charged(n=args.n)


POLICY = Policy(
    defaults=Defaults(max_attempts=2, notify_tool=None),
    approvals=(ApprovalRule(tool="charge", field="amount", above=100),),
)


OPS = ["enqueue", "approval", "approve", "reject", "cancel", "replay"]


class InjectedAbort(Exception):
    """Raised inside a transaction after its writes: nothing of it may commit."""


@dataclass
class Model:
    """What the test knows about one task."""

    task_id: str
    approval_id: str | None = None
    not_before: datetime | None = None
    approved: bool = False
    decided: bool = False  # approved or rejected
    stopped_at_calls: int | None = None  # calls when it was cancelled or rejected
    failed_before: int = 0  # failed runs before its last replay (which resets the count)


def ledger_snapshot(rt: Runtime) -> list[tuple[str, Any]]:
    return [
        (table, rt.backend.list_records(table))
        for table in (Tables.TASKS, Tables.APPROVALS, Tables.DEAD_LETTERS, Tables.IDEMPOTENCY)
    ]
