"""The chaos run's agent: decides refunds, re-sends, cancels, approves and rejects.

It is never killed: an error of its calls is a finding, except one that says the
database is unreachable (:class:`~agentq.errors.BackendUnavailable`, while a
PostgreSQL server restarts) or that the transaction aborted and nothing of it
committed (:class:`~agentq.errors.TransactionAborted`: the Spanner emulator
runs one transaction at a time and aborts the others). After the first the
call's outcome may be unknown (the connection broke during the commit), and the
agent does what an application must: it retries until it gets an answer, and
every action is written so that a repeat after an unknown outcome does what one
call would have done (the order row is inserted only if missing, the enqueue
carries its idempotency key, an approval or a cancel first reads whether it
happened already).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from agentq import IllegalTransition, Runtime
from agentq.approvals import ApprovalStatus
from agentq.errors import BackendUnavailable, TransactionAborted
from agentq.ledger import Tables, TaskInfo, TaskStatus
from agentq.runtime import Decision
from tests.chaos.appsql import portable
from tests.chaos.checks import Decided

__all__ = ["Agent", "retrying"]

T = TypeVar("T")
#: How long a call may keep failing with BackendUnavailable (a restart takes seconds).
RETRY_BOUND = 180.0


def retrying(fn: Callable[[], T], on_retry: Callable[[Exception], None]) -> T:
    """``fn()``, again after each BackendUnavailable or TransactionAborted until
    :data:`RETRY_BOUND` passed."""
    deadline = time.monotonic() + RETRY_BOUND
    while True:
        try:
            return fn()
        except (BackendUnavailable, TransactionAborted) as exc:
            if time.monotonic() > deadline:
                raise
            on_retry(exc)
            time.sleep(0.2)


@dataclass
class Agent:
    """The controller's own view of what it decided."""

    rt: Runtime
    rng: random.Random
    kind: str = "sqlite"  # the backend, for the dialect of its own SQL
    decided: dict[str, Decided] = field(default_factory=dict)  # task id -> what we did
    orders: dict[str, tuple[str, float]] = field(default_factory=dict)  # order -> (task, amt)
    pending: list[tuple[str, str, float]] = field(default_factory=list)  # (approval, task, t)
    dedup_mismatches: int = 0
    retries: int = 0  # calls repeated after BackendUnavailable or TransactionAborted
    retry_reasons: list[str] = field(default_factory=list)  # the first few
    n: int = 0

    def _retry(self, fn: Callable[[], T]) -> T:
        def count(exc: Exception) -> None:
            self.retries += 1
            if len(self.retry_reasons) < 5:
                self.retry_reasons.append(str(exc).splitlines()[0][:300])

        return retrying(fn, count)

    def insert_order(self, tx: Decision, order: str, amount: float) -> None:
        # Only if missing: a repeat after an unknown commit outcome finds it there.
        found = tx.execute(*portable(self.kind, "SELECT id FROM orders WHERE id = ?", (order,)))
        if not found:
            tx.execute(
                *portable(
                    self.kind,
                    "INSERT INTO orders (id, amount, state) VALUES (?, ?, 'refund_decided')",
                    (order, amount),
                )
            )

    def new_refund(self) -> None:
        order = f"order-{self.n:05}"
        self.n += 1
        big = self.rng.random() < 0.3
        amount = round(self.rng.uniform(150, 900) if big else self.rng.uniform(5, 100), 2)
        args = {"order_id": order, "amount": amount, "reason": "chaos"}
        key = f"chaos:{order}"
        if self.rng.random() < 0.5:

            def decide(tx: Decision) -> TaskInfo:
                self.insert_order(tx, order, amount)
                return tx.enqueue("execute_refund", args, idempotency_key=key)

            task = self._retry(lambda: self.rt.transact(decide))
        else:
            self._retry(lambda: self.rt.transact(lambda tx: self.insert_order(tx, order, amount)))
            task = self._retry(
                lambda: self.rt.enqueue_action("execute_refund", args, idempotency_key=key)
            )
        self.decided[task.task_id] = Decided(task.task_id, order, amount)
        self.orders[order] = (task.task_id, amount)
        if task.approval_id is not None:
            self.pending.append((task.approval_id, task.task_id, time.monotonic()))

    def resend(self) -> None:
        """The agent retries a call it already made: same key, same args, same task."""
        order = self.rng.choice(list(self.orders))
        task_id, amount = self.orders[order]
        args = {"order_id": order, "amount": amount, "reason": "chaos"}
        again = self._retry(
            lambda: self.rt.enqueue_action("execute_refund", args, idempotency_key=f"chaos:{order}")
        )
        self.dedup_mismatches += again.task_id != task_id

    def cancel_one(self) -> None:
        candidates = [d for d in self.decided.values() if d.cancel_saw is None]
        if not candidates:
            return
        d = self.rng.choice(candidates)
        attempts = 0

        def cancel(tx: Decision) -> tuple[str, bool]:
            rec = tx.tx.get_record(Tables.TASKS, d.task_id) or {}
            status = str(rec.get("status"))
            if attempts > 1 and status == TaskStatus.CANCELLED.value:
                # An earlier attempt committed, its answer was lost: what it saw is
                # unknown, so the "cancelled before it ran" check does not apply.
                return "unknown (the first attempt's answer was lost)", True
            tx.cancel(d.task_id)
            return status, True

        def attempt() -> tuple[str, bool]:
            nonlocal attempts
            attempts += 1
            return self.rt.transact(cancel)

        try:
            d.cancel_saw, d.cancelled = self._retry(attempt)
        except IllegalTransition as exc:  # it had finished: the lifecycle refuses
            d.cancel_saw, d.cancelled = str(exc), False
        d.cancelled_at = time.monotonic()
        if d.cancelled:
            self.pending = [p for p in self.pending if p[1] != d.task_id]

    def _decide_one(self, approval_id: str, task_id: str) -> None:
        approve = self.rng.random() < 0.75

        def once() -> None:
            # A repeat after a lost answer finds the decision made: take it as it is.
            status = self.rt.approval(approval_id).status
            if status not in (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED):
                self.decided[task_id].approved = status == ApprovalStatus.APPROVED
                self.decided[task_id].rejected = status == ApprovalStatus.REJECTED
                return
            if approve:
                self.rt.approve(approval_id, by="chaos-approver")
            else:
                self.rt.reject(approval_id, by="chaos-approver", note="not eligible")
            self.decided[task_id].approved = approve
            self.decided[task_id].rejected = not approve

        self._retry(once)

    def decide_approvals(self, older_than: float) -> None:
        now = time.monotonic()
        ripe = [p for p in self.pending if now - p[2] >= older_than]
        for entry in ripe:
            self.pending.remove(entry)
            self._decide_one(entry[0], entry[1])
