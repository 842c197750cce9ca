"""What a chaos run must show, checked from the ledger, the orders table and the API.

* every decided task is in the ledger (``lost`` counts those that are not) and
  final: succeeded, dead with a reason, or cancelled (``stuck`` counts those that
  are not once the run settled), and the refunds queue holds no message for it;
* no completion is recorded twice (``doubled``: an order whose refund completion, the
  tool's ``on_commit``, was written more than once), and none is recorded for a task
  that did not succeed;
* at most one charge per task id (``charged_twice``), exactly one per succeeded task,
  and the result a succeeded task recorded is the charge the API applied;
* a task cancelled before any attempt of it ran (the cancel saw it queued or awaiting
  approval) and a rejected one charged nothing; a task cancelled while running may
  have been charged (its handler was already calling the API), at most once;
* re-sending an idempotency key returned the same task.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Set
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from agentq import Runtime
from agentq.demo_server import DemoAPI
from agentq.ledger import TaskStatus

if TYPE_CHECKING:
    from tests.chaos.run_checks import RunsReport

#: States in which no attempt of a task can be calling the API.
NOT_STARTED = frozenset({TaskStatus.QUEUED, TaskStatus.AWAITING_APPROVAL})


@dataclass
class Decided:
    """One refund the agent decided, and what it did to it later."""

    task_id: str
    order_id: str
    amount: float
    approved: bool = False
    rejected: bool = False
    cancel_saw: str | None = None  # the task's status inside the cancel's transaction
    cancelled: bool = False
    cancelled_at: float | None = None  # monotonic time the cancel committed


@dataclass
class ChaosReport:
    """Counts of a chaos run; ``problems`` names each violated property."""

    kills: int = 0
    kills_after_charge: int = 0
    kills_model_answering: int = 0  # --runs: by the model's hook, before its answer
    kills_model_answered: int = 0  # --runs: just after the model's answer
    freezes: int = 0
    workers_started: int = 0
    tasks: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    approved: int = 0
    rejected: int = 0
    cancels: int = 0
    lost: int = 0
    stuck: int = 0
    doubled: int = 0
    charged_twice: int = 0
    charges: int = 0
    api_attempts: int = 0
    duplicate_charges_prevented: int = 0
    redelivered: int = 0
    dedup_mismatches: int = 0
    backend: str = "sqlite"
    worker_exits: int = 0  # workers that died without being killed
    agent_retries: int = 0  # the agent's calls repeated after BackendUnavailable
    agent_retry_reasons: list[str] = field(default_factory=list)  # the first few
    restarts: list[str] = field(default_factory=list)  # database server restarts
    http_tasks: int = 0  # refunds enqueued through agentq serve
    http_retries: int = 0  # HTTP enqueues repeated (503, refused connection, ...)
    # Enqueue to completion of succeeded refunds that needed no approval, in s.
    latency_p50: float | None = None
    latency_max: float | None = None
    dead_reasons: list[str] = field(default_factory=list)  # the first few distinct
    kill_phase_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    runs: RunsReport | None = None  # --runs: the durable runs' figures
    kills_starter: int = 0  # --frameworks langgraph: user processes killed at random
    #: --frameworks: each framework's figures (RunsReport, or GraphsReport for LangGraph)
    frameworks: dict[str, RunsReport] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No property was violated."""
        return not self.problems

    def summary(self) -> str:
        """One line for people: kills, tasks, lost, doubled, charged twice."""
        restarts = f"restarts={len(self.restarts)} " if self.restarts else ""
        http = f"http_tasks={self.http_tasks} " if self.http_tasks else ""
        model = (
            f"while the model answered: {self.kills_model_answering}, just after: "
            f"{self.kills_model_answered}, "
            if self.runs is not None or self.frameworks else ""
        )
        starters = f"starters: {self.kills_starter}, " if self.kills_starter else ""
        runs = f"\nruns: {self.runs.summary()}" if self.runs is not None else ""
        runs += "".join(f"\n{name}: {r.summary()}" for name, r in self.frameworks.items())
        return (
            f"backend={self.backend} "
            f"kills={self.kills} ({model}{starters}after a charge: {self.kills_after_charge}) "
            f"{restarts}{http}"
            f"freezes={self.freezes} "
            f"tasks={self.tasks} lost={self.lost} stuck={self.stuck} doubled={self.doubled} "
            f"charged_twice={self.charged_twice} outcomes={self.outcomes} "
            f"elapsed={self.elapsed_seconds}s{runs}"
        )

    def to_json(self) -> str:
        """Everything, as JSON."""
        return json.dumps(asdict(self) | {"ok": self.ok}, indent=2, sort_keys=True)


def check_run(
    rt: Runtime,
    api: DemoAPI,
    decided: dict[str, Decided],
    not_final: set[str],
    charged_at: Mapping[str, tuple[float, int | None]],
    also_charged: Set[str] = frozenset(),
) -> ChaosReport:
    """Compare the ledger, the orders table and the API's books (``also_charged``:
    task ids that may be charged besides the decided ones, the runs' calls,
    checked by :mod:`tests.chaos.run_checks`)."""
    r = ChaosReport(tasks=len(decided), stuck=len(not_final))
    problems = r.problems
    tasks = {t.task_id: t for t in rt.tasks() if t.task_id in decided}
    commits = Counter(
        row[0] for row in rt.transact(lambda tx: tx.execute("SELECT order_id FROM refund_commits"))
    )
    refund_ids = {
        row[0]: row[1]
        for row in rt.transact(lambda tx: tx.execute("SELECT id, refund_id FROM orders"))
    }
    charges = api.charges_per_key("/refunds")
    r.outcomes = dict(sorted(Counter(t.status.value for t in tasks.values()).items()))
    r.charges = sum(n for key, n in charges.items() if key not in also_charged)
    r.api_attempts = api.requests("/refunds")
    r.duplicate_charges_prevented = api.replays("/refunds")
    r.charged_twice = sum(1 for n in charges.values() if n > 1)  # the runs' calls too
    r.doubled = sum(1 for n in commits.values() if n > 1)
    r.approved = sum(d.approved for d in decided.values())
    r.rejected = sum(d.rejected for d in decided.values())
    r.cancels = sum(d.cancelled for d in decided.values())
    r.redelivered = sum(1 for t in tasks.values() if t.deliveries > 1)
    took = sorted(
        (t.finished_at - t.created_at).total_seconds()
        for t in tasks.values()
        if t.status == TaskStatus.SUCCEEDED and t.finished_at and not t.approval_id
    )
    if took:
        r.latency_p50, r.latency_max = round(took[len(took) // 2], 2), round(took[-1], 2)
    reasons = {(t.error or "")[:200] for t in tasks.values() if t.status == TaskStatus.DEAD}
    r.dead_reasons = sorted(reasons)[:5]
    if r.stuck:
        problems.append(f"{r.stuck} decided task(s) never became final: {sorted(not_final)[:5]}")
    missing = set(decided) - set(tasks)
    r.lost = len(missing)
    if missing:
        problems.append(f"{len(missing)} decided task(s) missing from the ledger")
    left = rt.backend.stats("payments").depth
    if left and not r.stuck:
        problems.append(f"every task is final, yet the refunds queue holds {left} message(s)")
    if r.doubled:
        problems.append(f"{r.doubled} completion(s) recorded more than once")
    if r.charged_twice:
        problems.append(f"{r.charged_twice} task id(s) charged more than once")
    unknown = set(charges) - set(decided) - set(also_charged)
    if unknown:
        problems.append(f"charges under unknown keys: {sorted(unknown)[:5]}")
    for task_id, d in decided.items():
        t = tasks.get(task_id)
        if t is None:
            continue
        n_charges = charges.get(task_id, 0)
        n_commits = commits.get(d.order_id, 0)
        where = f"task {task_id} ({d.order_id}, {t.status.value})"
        if t.status == TaskStatus.SUCCEEDED:
            if n_charges != 1:
                problems.append(f"{where}: succeeded with {n_charges} charge(s)")
            if n_commits != 1:
                problems.append(f"{where}: completion recorded {n_commits} time(s)")
            elif (t.result or {}).get("refund_id") != refund_ids.get(d.order_id):
                problems.append(f"{where}: order's refund id is not the recorded result")
        elif n_commits:
            problems.append(f"{where}: a completion was recorded but the task did not succeed")
        if t.status == TaskStatus.DEAD and not t.error:
            problems.append(f"{where}: dead without a reason")
        if d.rejected and (t.status != TaskStatus.CANCELLED or n_charges):
            problems.append(f"{where}: rejected, yet charged {n_charges} time(s)")
        if d.cancelled:
            if t.status != TaskStatus.CANCELLED:
                problems.append(f"{where}: cancel returned True but the task is not cancelled")
            if d.cancel_saw in NOT_STARTED and n_charges:
                when, pid = charged_at.get(task_id, (0.0, None))
                after = when - (d.cancelled_at or 0.0)
                problems.append(
                    f"{where}: cancelled while {d.cancel_saw}, yet charged {after:+.3f} s after "
                    f"the cancel by worker {pid}; ledger: attempt {t.attempt}, deliveries "
                    f"{t.deliveries}, started {t.started_at}, finished {t.finished_at}, "
                    f"approval {t.approval_id}"
                )
        unapproved = t.approval_id and not (d.approved or d.rejected or d.cancelled)
        if unapproved and t.status == TaskStatus.SUCCEEDED:
            problems.append(f"{where}: needed approval, ran without one")
    return r
