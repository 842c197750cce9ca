"""``agentq demo``: the refund bot end to end, on the embedded SQLite backend
(a temporary file) or on a database given with ``--db`` (PostgreSQL: in a schema
of its own, kept afterwards for ``agentq ui`` to show).

What happens, in about fifteen seconds of real time:

1. A payments / notifications / shipping API starts on loopback. It honours
   ``Idempotency-Key``: a repeated key gets the first answer and is never
   charged twice.
2. A worker **process** (``agentq worker``) starts; the first refund is made to
   stall inside the payments API after the charge is applied, and the demo
   kills that process with SIGKILL: the worst crash window (external effect
   done, result not committed).
3. A simulated agent decides on a stream of refund requests: each decision
   writes the order's state and enqueues the refund in one transaction. Small
   refunds run at once; large ones wait for a human (policy), with an
   escalation timer (3 s here instead of 72 h). Some are approved in time, one
   is rejected, the rest escalate, and one is approved after escalating.
4. An in-process worker serves everything, including the killed worker's task
   once its lease expires (10 s, as in Spanner), which calls the API again
   with the same key: the API answers from its idempotency store.
5. A summary: tasks by outcome, refunds executed, duplicate charges prevented,
   escalations fired and cancelled, and a check that nothing was charged twice.

The demo brings its own project (:mod:`agentq.demo.project`): the refund bot's
tools and policy shipped with agentq, whatever folder it runs from; a folder's
own ``tools/``, ``policies/`` or ``agentq.toml`` are never read (``--tools`` and
``--policies`` choose others explicitly). Where its data goes is
:mod:`agentq.demo.databases`', how it waits :mod:`agentq.demo.waiting`'s.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from agentq.approvals import ApprovalStatus
from agentq.backends.base import LEASE_SECONDS
from agentq.clock import Clock, SystemClock
from agentq.demo.databases import (
    DEMO_SCHEMA,
    demo_database,
    is_postgres,
    kept_database,
    new_sqlite_database,
)
from agentq.demo.project import find_project_dir, project_dirs
from agentq.demo.scaffold import new_project
from agentq.demo.summary import DemoSummary, fill_summary, format_summary
from agentq.demo.waiting import DemoFailed, all_settled, lease_note, wait_for
from agentq.demo_server import LoopbackAPI
from agentq.errors import ConfigError
from agentq.ledger import TaskStatus
from agentq.lifecycle import heartbeats
from agentq.policies import load_policies
from agentq.runtime import Decision, Runtime

__all__ = [
    "DEMO_SCHEMA",
    "DemoFailed",
    "DemoSummary",
    "LoopbackAPI",
    "demo_database",
    "find_project_dir",
    "format_summary",
    "kept_database",
    "new_project",
    "new_sqlite_database",
    "run_demo",
]

ESCALATE_AFTER = timedelta(seconds=3)
#: How long the killed worker's process may take to start and take its task.
WORKER_START_SECONDS = 30.0


def run_demo(
    *,
    requests: int = 24,
    seed: int = 7,
    tools: str | None = None,
    policies: str | None = None,
    workdir: str | None = None,
    db: str | None = None,
    crash: bool = True,
    out: Callable[[str], None] = print,
) -> DemoSummary:
    """Run the refund-bot demo and return its summary.

    ``db``: a database to run in and leave behind to look at (``agentq demo
    --keep``): a ``sqlite:///`` file that does not exist yet, which the demo
    makes, or a ``postgresql://`` database, where the demo keeps to a schema of
    its own (see :func:`demo_database`) that must hold no tasks yet. By default
    it runs in a temporary folder, removed after."""
    tmp = tempfile.TemporaryDirectory(prefix="agentq-demo-") if workdir is None else None
    workdir = workdir or (tmp.name if tmp else ".")
    try:
        clock: Clock = SystemClock()
        started = clock.monotonic()
        tools_dir, policies_dir = project_dirs(tools, policies)
        policy = load_policies(policies_dir)
        # Accelerated escalations: 3 s instead of 72 h, so the demo shows them firing.
        policy = policy.model_copy(
            update={
                "approvals": tuple(
                    rule.model_copy(update={"escalate_after": ESCALATE_AFTER})
                    for rule in policy.approvals
                )
            }
        )
        # The folder the killed worker runs in (and, by default, the database's).
        root = Path(workdir)
        if db is None:
            db_url = f"sqlite:///{root / 'demo.db'}"
        elif is_postgres(db):
            db_url = demo_database(db)
        else:
            db_url = new_sqlite_database(db)
        summary = DemoSummary()
        rng = random.Random(seed)

        def say(msg: str) -> None:
            out(f"[{clock.monotonic() - started:5.1f}s] {msg}")

        with LoopbackAPI() as api:
            settings = {
                "payments_url": api.url,
                "notifications_url": api.url,
                "shipping_url": api.url,
                "orders_table": "orders",
            }
            rt = Runtime(db_url, tools=tools_dir, policies=policy, clock=clock, settings=settings)
            try:
                if rt.tasks(limit=1):  # a PostgreSQL schema: a SQLite file is new
                    schema = getattr(rt.backend, "schema", DEMO_SCHEMA)
                    raise ConfigError(
                        f"agentq demo needs a database without tasks; {rt.backend.url} has tasks "
                        f"of an earlier run: drop its schema (DROP SCHEMA {schema} CASCADE), or "
                        "name another with ?schema="
                    )
                say(f"database {rt.backend.url}; loopback API at {api.url}")
                rt.transact(
                    lambda tx: tx.execute(
                        "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount REAL, "
                        "state TEXT NOT NULL, refund_id TEXT)"
                    )
                )
                crash_order = "order-000"
                crashed_task: str | None = None
                if crash:
                    crashed_task = _crash_a_worker(
                        rt, api, db_url, root, tools_dir, policies_dir, crash_order, say
                    )
                    summary.worker_crashes = 1
                # A transient outage the runtime must ride out (503 with Retry-After).
                api.fail_next("/refunds", 503, retry_after=1)
                worker = rt.worker(concurrency=8).start()
                say("in-process worker started (8 handler threads)")
                large: list[tuple[str, str]] = []
                in_time: list[tuple[str, str]] = []
                first = 1 if crash else 0
                for i in range(first, requests):
                    order = f"order-{i:03}"
                    amount = round(
                        rng.uniform(150, 900) if rng.random() < 0.3 else rng.uniform(5, 100), 2
                    )
                    task = rt.transact(_decide(order, amount, ship=i % 4 == 0))
                    summary.refund_requests += 1
                    summary.shipments_requested += i % 4 == 0
                    if task.status == TaskStatus.AWAITING_APPROVAL:
                        summary.needed_approval += 1
                        large.append((order, task.approval_id or ""))
                        if len(large) % 2 == 1:
                            # A human answers this one at once: well within its
                            # escalation, however slow this machine is.
                            rt.approve(large[-1][1], by="alice", note=f"checked {order}")
                            summary.approved_in_time += 1
                            in_time.append(large[-1])
                    else:
                        summary.auto_approved += 1
                    clock.sleep(0.05)
                if crash:
                    summary.refund_requests += 1
                    summary.auto_approved += 1
                say(
                    f"agent decided {summary.refund_requests} refunds: {summary.auto_approved} "
                    f"auto-approved, {summary.needed_approval} waiting for a human"
                )
                # Humans approved every other large refund at once (above); now they
                # reject one and let the rest escalate.
                decided = list(in_time)
                rest = [a for a in large if a not in decided]
                if len(rest) > 1:
                    order, approval_id = rest[0]
                    rt.reject(approval_id, by="alice", note="duplicate request")
                    summary.rejected += 1
                    decided = [*decided, (order, approval_id)]
                waiting = [a for a in large if a not in decided]
                say(
                    f"humans approved {summary.approved_in_time}, rejected {summary.rejected}; "
                    f"{len(waiting)} left to escalate after {ESCALATE_AFTER.total_seconds():g}s"
                )
                wait_for(rt, clock, say, lambda: all(
                    rt.approval(a).status == ApprovalStatus.ESCALATED for _, a in waiting
                ), "escalations")  # fmt: skip
                if waiting:
                    rt.approve(waiting[0][1], by="manager", note="approved after escalation")
                    summary.approved_after_escalation = 1
                    say("a manager approved one escalated refund (late approval still works)")
                wait_for(rt, clock, say, lambda: all_settled(rt), "all tasks",
                         lambda: lease_note(rt, crashed_task))  # fmt: skip
                worker.stop()
                summary.stale_completions = worker.stats["stale_completion"]
                fill_summary(rt, api, summary, crashed_task)
            finally:
                rt.close()
        summary.elapsed_seconds = round(clock.monotonic() - started, 2)
        return summary
    finally:
        if tmp is not None:
            tmp.cleanup()  # however the demo ended


def _decide(order: str, amount: float, ship: bool) -> Callable[[Decision], Any]:
    """The agent's decision: order state and the tool calls it implies, atomically."""

    def decide(tx: Decision) -> Any:
        tx.execute(
            "INSERT INTO orders (id, amount, state) VALUES (?, ?, 'refund_decided')",
            (order, amount),
        )
        task = tx.enqueue(
            "execute_refund",
            {"order_id": order, "amount": amount, "reason": "damaged in transit"},
            idempotency_key=f"refund:{order}",
            reason=f"refund {amount:.2f} for {order}",
        )
        if ship:
            tx.enqueue(
                "request_shipping",
                {
                    "order_id": order,
                    "address": "1 Loopback Way, 127.0.0.1",
                    "items": ["replacement"],
                },
                ordering_key=order,
            )
        return task

    return decide


def _crash_a_worker(
    rt: Runtime,
    api: LoopbackAPI,
    db_url: str,
    workdir: Path,
    tools_dir: Path,
    policies_dir: Path,
    order: str,
    say: Callable[[str], None],
) -> str:
    """Start a worker process, let it charge a refund, and kill it before it commits."""
    received, release = api.stall_after_applying(order)
    # Named, so that its heartbeat can be forgotten after the kill (below).
    worker_id = f"agentq-demo-killed-worker-{os.urandom(4).hex()}"
    cmd = [
        sys.executable, "-c", "import sys; from agentq.cli import main; sys.exit(main())",
        "worker", "--id", worker_id, "--tools", str(tools_dir),
        "--policies", str(policies_dir), "--queue", "payments", "--concurrency", "1",
        "--setting", f"payments_url={api.url}", "--setting", "orders_table=orders",
    ]  # fmt: skip
    # The URL goes by the environment: a password in it stays out of the process list.
    env = {**os.environ, "AGENTQ_DB": db_url}
    # Run in the demo's own folder: the user's folder (its agentq.toml) is not the demo's.
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    say(f"worker process {proc.pid} started")
    task = rt.transact(_decide(order, 42.0, ship=False))
    if not received.wait(WORKER_START_SECONDS):
        proc.kill()
        proc.wait(10)
        said = []
        if proc.stderr is not None:
            said = [line for line in proc.stderr.read().splitlines() if line.strip()]
            proc.stderr.close()
        raise DemoFailed(
            f"the demo's worker process did not take its task within "
            f"{WORKER_START_SECONDS:g} s (database {db_url})"
            + (f"; its last words: {said[-1].strip()}" if said else "")
        )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    if proc.stderr is not None:
        proc.stderr.close()
    # The kill was the demo's own: its heartbeat must not haunt a kept database as a
    # "silent" worker, nor come due as a lost one in the user's first worker.
    rt.backend.transact(lambda tx: heartbeats.forget(tx, worker_id), durable=False)
    release.set()
    say(
        f"killed worker {proc.pid} (SIGKILL) after the payments API charged {order}, "
        "before its result committed"
    )
    say(
        f"its task {task.task_id} stays leased to the dead worker until the lease runs out "
        f"(leases last {LEASE_SECONDS:g} s, as in Spanner, and were renewed until the kill); "
        "then it is delivered again and the payments API answers the repeated "
        "Idempotency-Key from its store"
    )
    return str(task.task_id)
