"""How ``agentq demo`` waits for its tasks to settle, and says what it waits
for; a wait that runs out ends the demo with :class:`DemoFailed`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from agentq.approvals import ApprovalStatus
from agentq.backends.base import LEASE_SECONDS
from agentq.clock import Clock
from agentq.errors import AgentQError
from agentq.ledger import TaskStatus
from agentq.runtime import Runtime

__all__ = ["DemoFailed", "all_settled", "lease_note", "wait_for"]


class DemoFailed(AgentQError):
    """The demo could not finish; the message says why in one line."""


def all_settled(rt: Runtime) -> bool:
    """Whether every task is done, or awaits a human who has not answered."""
    for task in rt.tasks():
        if task.status == TaskStatus.AWAITING_APPROVAL:
            approval = rt.approval(task.approval_id or "")
            if approval.status in (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED):
                continue  # a human has not answered: settled for the demo
        if not task.done:
            return False
    return True


def lease_note(rt: Runtime, crashed_task: str | None) -> str:
    """What the wait is for while the killed worker's task is still leased to it."""
    if crashed_task is None:
        return ""
    task = rt.task(crashed_task)
    if task.status != TaskStatus.RUNNING or task.deliveries > 1:
        return ""
    return (
        f" (task {crashed_task} is the killed worker's: it runs again once its "
        f"{LEASE_SECONDS:g} s lease runs out)"
    )


def wait_for(
    rt: Runtime,
    clock: Clock,
    say: Callable[[str], None],
    cond: Callable[[], bool],
    what: str,
    note: Callable[[], str] = lambda: "",
) -> None:
    """Wait until ``cond()`` (at most 45 s), saying every 2 s what the tasks are."""
    last = -1.0
    deadline = clock.monotonic() + 45
    while not cond():
        now = clock.monotonic()
        if now > deadline:
            raise DemoFailed(f"the demo timed out waiting for {what}")
        if now - last >= 2:
            counts = Counter(t.status.value for t in rt.tasks())
            say(
                "waiting for "
                + what
                + ": "
                + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                + note()
            )
            last = now
        clock.sleep(0.1)
