"""The chaos run: an agent deciding refunds while workers are SIGKILLed at random.

:func:`run_chaos` starts the loopback payments API (:class:`agentq.demo_server.DemoAPI`,
which applies each ``Idempotency-Key`` once and counts attempts), a few worker processes
on one SQLite file (:mod:`tests.chaos.workers`), and then, for the kill phase:

* decides refunds (half as a decision transaction that writes the order row and
  enqueues the refund, half as ``enqueue_action`` after the row exists), some large
  enough to need a human (``policies/refunds.toml``: above 100), and re-sends some
  idempotency keys, which must return the same task;
* cancels some tasks, whatever their state, noting the state the cancel saw inside
  its own transaction;
* approves or rejects the refunds waiting for a human;
* SIGKILLs a random worker every fraction of a second, and, from the payments API's
  hook, the worker whose charge was just applied (before it gets the answer);
* answers a few charges with 503 + Retry-After.

Then it decides every approval still open, stops killing, waits (bounded) until every
decided task is final and checks the outcome (:mod:`tests.chaos.checks`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentq import IllegalTransition, Runtime, SystemClock
from agentq.backends import LEASE_SECONDS
from agentq.demo_server import DemoAPI
from agentq.ledger import Tables, TaskInfo
from agentq.runtime import Decision
from tests.chaos.checks import ChaosReport, Decided, check_run
from tests.chaos.workers import ROOT, Supervisor, requesting_pid, worker_settings

#: Application schema: each recorded completion of a refund (the tool's ``on_commit``
#: sets the order 'refunded') adds a row, so a completion recorded twice shows as two.
SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount REAL, state TEXT NOT NULL,
                                   refund_id TEXT);
CREATE TABLE IF NOT EXISTS refund_commits (order_id TEXT NOT NULL, refund_id TEXT);
CREATE TRIGGER IF NOT EXISTS count_refund_commits AFTER UPDATE OF state ON orders
WHEN NEW.state = 'refunded'
BEGIN INSERT INTO refund_commits (order_id, refund_id) VALUES (NEW.id, NEW.refund_id); END;
"""


@dataclass
class ChaosConfig:
    """How hard and how long to shake. Durations are real seconds."""

    min_kill_seconds: float = 15.0  # the kill phase lasts at least this long...
    max_kill_seconds: float = 30.0  # ...and at most this long,
    target_kills: int = 55  # ending early once this many kills happened
    # The phase ends only once a worker died right after its charge: past
    # max_kill_seconds random kills pause (a loaded machine's workers may be killed
    # before they charge at all) and the phase waits at most this long for one.
    charge_kill_wait: float = 60.0
    # Bound on waiting for every decided task to be final (it ends as soon as they
    # are): generous, since a loaded machine restarts killed workers slowly.
    settle_seconds: float = 90.0
    workers: int = 3
    kill_interval: tuple[float, float] = (0.2, 0.6)
    min_life: float = 0.3  # a worker lives this long before a random kill may pick it
    kill_after_charge: float = 0.25  # chance the charging worker dies right after a charge
    freezes: int = 1  # workers stopped past their leases (SIGSTOP, SIGCONT 11 s later)
    seed: int = 1


@dataclass
class _Agent:
    """The controller's own view of what it decided."""

    rt: Runtime
    rng: random.Random
    decided: dict[str, Decided] = field(default_factory=dict)  # task id -> what we did
    orders: dict[str, tuple[str, float]] = field(default_factory=dict)  # order -> (task, amt)
    pending: list[tuple[str, str, float]] = field(default_factory=list)  # (approval, task, t)
    dedup_mismatches: int = 0
    n: int = 0

    def new_refund(self) -> None:
        order = f"order-{self.n:05}"
        self.n += 1
        big = self.rng.random() < 0.3
        amount = round(self.rng.uniform(150, 900) if big else self.rng.uniform(5, 100), 2)
        args = {"order_id": order, "amount": amount, "reason": "chaos"}
        key = f"chaos:{order}"
        insert = "INSERT INTO orders (id, amount, state) VALUES (?, ?, 'refund_decided')"
        if self.rng.random() < 0.5:

            def decide(tx: Decision) -> TaskInfo:
                tx.execute(insert, (order, amount))
                return tx.enqueue("execute_refund", args, idempotency_key=key)

            task = self.rt.transact(decide)
        else:
            self.rt.transact(lambda tx: tx.execute(insert, (order, amount)))
            task = self.rt.enqueue_action("execute_refund", args, idempotency_key=key)
        self.decided[task.task_id] = Decided(task.task_id, order, amount)
        self.orders[order] = (task.task_id, amount)
        if task.approval_id is not None:
            self.pending.append((task.approval_id, task.task_id, time.monotonic()))

    def resend(self) -> None:
        """The agent retries a call it already made: same key, same args, same task."""
        order = self.rng.choice(list(self.orders))
        task_id, amount = self.orders[order]
        args = {"order_id": order, "amount": amount, "reason": "chaos"}
        again = self.rt.enqueue_action("execute_refund", args, idempotency_key=f"chaos:{order}")
        self.dedup_mismatches += again.task_id != task_id

    def cancel_one(self) -> None:
        candidates = [d for d in self.decided.values() if d.cancel_saw is None]
        if not candidates:
            return
        d = self.rng.choice(candidates)

        def cancel(tx: Decision) -> tuple[str, bool]:
            rec = tx.tx.get_record(Tables.TASKS, d.task_id) or {}
            tx.cancel(d.task_id)
            return str(rec.get("status")), True

        try:
            d.cancel_saw, d.cancelled = self.rt.transact(cancel)
        except IllegalTransition as exc:  # it had finished: the lifecycle refuses
            d.cancel_saw, d.cancelled = str(exc), False
        d.cancelled_at = time.monotonic()
        if d.cancelled:
            self.pending = [p for p in self.pending if p[1] != d.task_id]

    def decide_approvals(self, older_than: float) -> None:
        now = time.monotonic()
        ripe = [p for p in self.pending if now - p[2] >= older_than]
        for approval_id, task_id, _ in ripe:
            self.pending.remove((approval_id, task_id, _))
            if self.rng.random() < 0.75:
                self.rt.approve(approval_id, by="chaos-approver")
                self.decided[task_id].approved = True
            else:
                self.rt.reject(approval_id, by="chaos-approver", note="not eligible")
                self.decided[task_id].rejected = True


Log = Callable[[str], None]


def run_chaos(workdir: Path, config: ChaosConfig | None = None, log: Log = print) -> ChaosReport:
    """One chaos run in ``workdir``; returns what happened and every problem found."""
    cfg = config or ChaosConfig()
    rng = random.Random(cfg.seed)
    started = time.monotonic()
    db_url = f"sqlite:///{workdir / 'chaos.db'}"
    killing = threading.Event()
    supervisor: Supervisor | None = None

    charged_at: dict[str, tuple[float, int | None]] = {}  # task id -> (when, worker pid)

    def after_charge(path: str, headers: Mapping[str, str]) -> None:
        # Runs in the API's handler thread: the charge is applied, the answer not sent.
        if path != "/refunds":
            return
        key = {k.lower(): v for k, v in headers.items()}.get("idempotency-key", "")
        charged_at[key] = (time.monotonic(), requesting_pid(headers))
        if not killing.is_set() or supervisor is None:
            return
        pid = requesting_pid(headers)
        # Until one charging worker has died in this window, every charge kills its
        # worker: on a loaded machine workers may charge seldom before random kills
        # take them, and the run must still exercise the window it exists for.
        first = supervisor.counts.kills_after_charge == 0
        if pid is not None and (first or rng.random() < cfg.kill_after_charge):
            supervisor.kill_pid(pid)

    with DemoAPI(on_applied=after_charge) as api:
        rt = Runtime(
            db_url, tools=ROOT / "tools", policies=ROOT / "policies", clock=SystemClock(),
            settings=worker_settings(api.url),
        )  # fmt: skip
        try:
            rt.backend.transact(lambda tx: [tx.execute(s) for s in _statements(SCHEMA)])
            agent = _Agent(rt, random.Random(cfg.seed + 1))
            supervisor = Supervisor(cfg.workers, db_url, api.url, seed=cfg.seed + 2)
            killing.set()
            kill_phase_end = _kill_phase(agent, api, supervisor, cfg, rng, log)
            killing.clear()
            agent.decide_approvals(older_than=0.0)
            lost = _settle(rt, set(agent.decided), cfg.settle_seconds, log)
            supervisor.close()
            supervisor_counts = supervisor.counts
            supervisor = None
            report = check_run(rt, api, agent.decided, lost, charged_at)
            report.kills = supervisor_counts.kills
            report.kills_after_charge = supervisor_counts.kills_after_charge
            report.freezes = supervisor_counts.freezes
            report.workers_started = supervisor_counts.started
            report.dedup_mismatches = agent.dedup_mismatches
            if agent.dedup_mismatches:
                report.problems.append(
                    f"{agent.dedup_mismatches} re-sent idempotency key(s) made another task"
                )
            report.kill_phase_seconds = round(kill_phase_end - started, 1)
        finally:
            if supervisor is not None:
                supervisor.close()
            rt.close()
    report.elapsed_seconds = round(time.monotonic() - started, 1)
    return report


def _statements(script: str) -> list[str]:
    """The SQL statements of ``script`` (the trigger body holds its own ``;``)."""
    parts, current = [], ""
    for piece in script.split(";"):
        current += piece + ";"
        if current.count("BEGIN") == current.count("END;"):
            if current.strip(" \n;"):
                parts.append(current.strip())
            current = ""
    return parts


def _kill_phase(
    agent: _Agent, api: DemoAPI, sup: Supervisor, cfg: ChaosConfig, rng: random.Random, log: Log
) -> float:
    start = time.monotonic()
    next_kill = start + rng.uniform(*cfg.kill_interval)
    # Freezes early enough in the phase that the frozen worker wakes before it ends.
    freezes = sorted(
        start + rng.uniform(1.0, max(cfg.min_kill_seconds - LEASE_SECONDS - 2, 1.0))
        for _ in range(cfg.freezes)
    )
    last_log = start
    while True:
        now = time.monotonic()
        elapsed = now - start
        overtime = elapsed >= cfg.max_kill_seconds
        enough = overtime or (
            elapsed >= cfg.min_kill_seconds and sup.counts.kills >= cfg.target_kills
        )
        charge_killed = sup.counts.kills_after_charge >= 1
        if (enough and charge_killed) or elapsed >= cfg.max_kill_seconds + cfg.charge_kill_wait:
            return now
        if freezes and now >= freezes[0] and sup.freeze_random(LEASE_SECONDS + 1):
            freezes.pop(0)
        if now >= next_kill and not overtime:
            sup.kill_random(cfg.min_life)
            next_kill = now + rng.uniform(*cfg.kill_interval)
        # The controller is never killed: any error of its decisions is a finding.
        roll = rng.random()
        if roll < 0.55 or not agent.orders:
            agent.new_refund()
        elif roll < 0.62:
            agent.resend()
        elif roll < 0.70:
            agent.cancel_one()
        elif roll < 0.72:
            api.fail_next("/refunds", 503, retry_after=0.5)
        agent.decide_approvals(older_than=0.5)
        if now - last_log >= 5:
            log(f"[{elapsed:5.1f}s] kills={sup.counts.kills} tasks={len(agent.decided)}")
            last_log = now
        time.sleep(0.02)


def _settle(rt: Runtime, task_ids: set[str], bound: float, log: Log) -> set[str]:
    """Wait until every task in ``task_ids`` is final; returns those that are not."""
    deadline = time.monotonic() + bound
    while True:
        open_ = {t.task_id for t in rt.tasks() if t.task_id in task_ids and not t.done}
        if not open_ or time.monotonic() > deadline:
            if open_:
                log(f"{len(open_)} task(s) not final after {bound:g} s")
            return open_
        time.sleep(0.2)
