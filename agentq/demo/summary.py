"""What ``agentq demo`` did, the checks it makes, and how it prints them."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field

from agentq.demo_server import LoopbackAPI
from agentq.ledger import TaskStatus
from agentq.runtime import Runtime

__all__ = ["DemoSummary", "fill_summary", "format_summary"]


@dataclass
class DemoSummary:
    """What the demo did; ``ok`` says whether every check held."""

    refund_requests: int = 0
    auto_approved: int = 0
    needed_approval: int = 0
    approved_in_time: int = 0
    approved_after_escalation: int = 0
    rejected: int = 0
    shipments_requested: int = 0
    tasks_by_outcome: dict[str, int] = field(default_factory=dict)
    refunds_executed: int = 0
    refund_api_calls: int = 0
    duplicate_charges_prevented: int = 0
    #: Refund calls answered with the demo's scripted outage (503, Retry-After: 1).
    refund_api_outages: int = 0
    #: Refund calls refused for want of an Idempotency-Key (none: agentq sends one).
    refund_api_refused: int = 0
    charged_twice: int = 0
    escalations_fired: int = 0
    escalations_cancelled: int = 0
    worker_crashes: int = 0
    crashed_task_completed_once: bool = False
    orders_consistent: bool = False
    stale_completions: int = 0
    elapsed_seconds: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check passed."""
        return all(self.checks.values())

    def to_json(self) -> str:
        """The summary as JSON."""
        return json.dumps(asdict(self) | {"ok": self.ok}, indent=2, sort_keys=True)


def fill_summary(rt: Runtime, api: LoopbackAPI, s: DemoSummary, crashed_task: str | None) -> None:
    """Count what the demo did from the ledger and the API, and run the checks."""
    tasks = rt.tasks()
    s.tasks_by_outcome = dict(sorted(Counter(f"{t.tool}:{t.status.value}" for t in tasks).items()))
    s.refunds_executed = len(api.applied("/refunds"))
    s.refund_api_calls = api.requests("/refunds")
    s.duplicate_charges_prevented = api.replays("/refunds")
    s.refund_api_outages = api.scripted_failures("/refunds")
    s.refund_api_refused = api.refused("/refunds")
    s.charged_twice = sum(1 for n in api.charges_per_key("/refunds").values() if n > 1)
    escalations = [t for t in tasks if t.kind == "escalation"]
    s.escalations_fired = sum(1 for t in escalations if t.status == TaskStatus.SUCCEEDED)
    s.escalations_cancelled = sum(1 for t in escalations if t.status == TaskStatus.CANCELLED)
    succeeded_refunds = {
        t.args["order_id"]
        for t in tasks
        if t.tool == "execute_refund" and t.status == TaskStatus.SUCCEEDED
    }
    refunded_orders = {
        r[0]
        for r in rt.transact(
            lambda tx: tx.execute("SELECT id FROM orders WHERE state = 'refunded'")
        )
    }
    s.orders_consistent = succeeded_refunds == refunded_orders
    if crashed_task is not None:
        info = rt.task(crashed_task)
        s.crashed_task_completed_once = (
            info.status == TaskStatus.SUCCEEDED
            and info.deliveries >= 2
            and api.charges_per_key("/refunds").get(crashed_task) == 1
        )
    s.checks = {
        "nothing charged twice": s.charged_twice == 0,
        "every executed refund is recorded once": s.refunds_executed == len(succeeded_refunds),
        "order states match refund results": s.orders_consistent,
        "escalations fired for unanswered approvals": s.escalations_fired >= 1,
        "escalations cancelled by approvals": s.escalations_cancelled >= 1,
        "no task dead-lettered": all(t.status != TaskStatus.DEAD for t in tasks),
        # Each call charged, was answered from the idempotency store, met the
        # scripted outage, or was refused: none unexplained.
        "every refund API call accounted for": s.refund_api_calls == (
            s.refunds_executed + s.duplicate_charges_prevented + s.refund_api_outages
            + s.refund_api_refused
        ),
    }
    if crashed_task is not None:
        s.checks["killed worker's task completed once"] = s.crashed_task_completed_once


def format_summary(s: DemoSummary) -> str:
    """Human-readable summary."""
    rows = [
        ("refund requests decided", s.refund_requests),
        ("  auto-approved (<= 100)", s.auto_approved),
        ("  needed a human", s.needed_approval),
        ("  approved in time", s.approved_in_time),
        ("  approved after escalation", s.approved_after_escalation),
        ("  rejected", s.rejected),
        ("shipments requested", s.shipments_requested),
        ("refunds executed", s.refunds_executed),
        ("refund API calls", s.refund_api_calls),
        ("  charged (first use of a key)", s.refunds_executed),
        ("  answered again, not charged", s.duplicate_charges_prevented),
        ("  scripted outage (503, retried)", s.refund_api_outages),
        ("  refused: no Idempotency-Key", s.refund_api_refused),
        ("charged twice", s.charged_twice),
        ("escalations fired", s.escalations_fired),
        ("escalations cancelled", s.escalations_cancelled),
        ("worker processes killed", s.worker_crashes),
        ("stale completions refused", s.stale_completions),
        ("elapsed", f"{s.elapsed_seconds:.1f}s"),
    ]
    lines = ["", "== agentq demo summary =="]
    lines += [f"  {k:<32} {v}" for k, v in rows]
    lines.append("  tasks by outcome:")
    lines += [f"    {k:<36} {v}" for k, v in s.tasks_by_outcome.items()]
    lines.append("  checks:")
    lines += [f"    [{'ok' if v else 'FAILED'}] {k}" for k, v in s.checks.items()]
    lines.append("RESULT: " + ("all checks passed" if s.ok else "SOME CHECKS FAILED"))
    return "\n".join(lines)
