"""The chaos run: an agent deciding refunds while workers are SIGKILLed at random.

:func:`run_chaos` makes the run's database (:mod:`tests.chaos.targets`: a SQLite
file, a throwaway PostgreSQL cluster, or the Spanner emulator behind the queue
stand-in, all on the real clock), starts the loopback payments API
(:class:`agentq.demo_server.DemoAPI`, which applies each ``Idempotency-Key`` once
and counts attempts) and a few worker processes (:mod:`tests.chaos.workers`), and
then, for the kill phase:

* decides refunds (half as a decision transaction that writes the order row and
  enqueues the refund, half as ``enqueue_action`` after the row exists), some large
  enough to need a human (``policies/refunds.toml``: above 100), and re-sends some
  idempotency keys, which must return the same task (:mod:`tests.chaos.agent`);
* cancels some tasks, whatever their state, noting the state the cancel saw inside
  its own transaction;
* approves or rejects the refunds waiting for a human;
* SIGKILLs a random worker every fraction of a second, and, from the payments API's
  hook, the worker whose charge was just applied (before it gets the answer);
* answers a few charges with 503 + Retry-After;
* with ``restarts`` (PostgreSQL), restarts the database server, fast then
  immediate, while ``agentq serve`` takes enqueues from a producer over HTTP
  (``http``): workers and server must come back by themselves
  (:mod:`tests.chaos.outages`, :mod:`tests.chaos.http_producer`).

With ``runs`` (``--runs``), durable agent runs go beside the refunds
(:mod:`tests.chaos.runs`): the workers' tools folder also defines an agent whose
model is a scripted OpenAI-compatible server on loopback (429s and 500s among
its answers); a driver starts runs (re-starting some by their idempotency key),
cancels some, and approves or rejects their large refunds after a while; the
model's hook SIGKILLs the worker it is answering, or the one it just answered.

Then it decides every approval still open, stops killing, waits (bounded) until every
decided task is final and every run ended, and checks the outcome
(:mod:`tests.chaos.checks`, :mod:`tests.chaos.run_checks`).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agentq import Runtime, SystemClock
from agentq.backends import LEASE_SECONDS
from agentq.demo_server import DemoAPI
from agentq.errors import BackendUnavailable, TransactionAborted
from agentq.testing import ScriptedModel
from tests.chaos.agent import Agent, retrying
from tests.chaos.checks import ChaosReport, check_run
from tests.chaos.frameworks import Frameworks, announce
from tests.chaos.http_producer import HttpProducer
from tests.chaos.lock_stalls import writer_lock_holders, writer_lock_path
from tests.chaos.outages import Outages, outage_problems
from tests.chaos.run_checks import check_runs
from tests.chaos.runs import ModelSide, RunDriver
from tests.chaos.targets import Target, open_target
from tests.chaos.workers import (
    MODEL_URL_VARIABLE,
    ROOT,
    RUNS_TOOLS,
    Supervisor,
    requesting_pid,
    worker_settings,
)

__all__ = ["ChaosConfig", "run_chaos"]


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
    backend: str = "sqlite"  # sqlite | postgresql | spanner
    # Database server restarts, spread over the kill phase's minimum (PostgreSQL):
    # each mode is pg_ctl stop's (fast, immediate).
    restarts: tuple[str, ...] = ()
    down_seconds: float = 3.0  # how long the server stays down
    recovery_bound: float = 60.0  # survivors and the HTTP server must be back by then
    http: bool = False  # agentq serve, fed by a producer over HTTP
    pace: float = 0.02  # the agent's pause between two of its actions
    # New refunds wait while the refunds queue holds more messages than this, so
    # that kills hit work under way rather than a backlog that drains only after.
    max_backlog: int = 60
    # Durable agent runs beside the refunds (tests.chaos.runs): at most this many
    # under way at once (0: none).
    runs: int = 0
    # The frameworks' agents beside them (tests.chaos.frameworks): langgraph,
    # openai-agents; each at most framework_runs runs (threads) under way.
    frameworks: tuple[str, ...] = ()
    framework_runs: int = 6


Log = Callable[[str], None]


def run_chaos(workdir: Path, config: ChaosConfig | None = None, log: Log = print) -> ChaosReport:
    """One chaos run in ``workdir``; returns what happened and every problem found."""
    cfg = config or ChaosConfig()
    started = time.monotonic()
    target = open_target(cfg.backend, workdir)
    try:
        report = _run(target, workdir, cfg, log)
    finally:
        target.close()
    report.elapsed_seconds = round(time.monotonic() - started, 1)
    return report


def _run(target: Target, workdir: Path, cfg: ChaosConfig, log: Log) -> ChaosReport:
    rng = random.Random(cfg.seed)
    started = time.monotonic()
    killing = threading.Event()
    supervisor: Supervisor | None = None
    producer: HttpProducer | None = None
    charged_at: dict[str, tuple[float, int | None]] = {}  # task id -> (when, worker pid)
    model_side = ModelSide(cfg.seed + 3, killing)
    asks = bool(cfg.runs or cfg.frameworks)  # a model is asked
    model = ScriptedModel(model_side.script, on_answered=model_side.hook) if asks else None
    fw: Frameworks | None = None
    last_charge: dict[int, float] = {}  # worker pid -> when it last applied a charge
    backlog = threading.Event()  # set: the refunds queue is full, decide no new ones

    def after_charge(path: str, headers: Mapping[str, str]) -> None:
        # Runs in the API's handler thread: the charge is applied, the answer not sent.
        if path != "/refunds":
            return
        key = {k.lower(): v for k, v in headers.items()}.get("idempotency-key", "")
        pid = requesting_pid(headers)
        charged_at[key] = (time.monotonic(), pid)
        if pid is not None:
            last_charge[pid] = time.monotonic()
        if not killing.is_set() or supervisor is None:
            return
        # Until one charging worker has died in this window, every charge kills its
        # worker: on a loaded machine workers may charge seldom before random kills
        # take them, and the run must still exercise the window it exists for.
        first = supervisor.counts.kills_after_charge == 0
        if pid is not None and (first or rng.random() < cfg.kill_after_charge):
            supervisor.kill_pid(pid)

    if model is not None:
        model.start()
        os.environ[MODEL_URL_VARIABLE] = model.base_url  # the agent's module reads it
    with DemoAPI(on_applied=after_charge) as api:
        rt = Runtime(
            target.url, policies=ROOT / "policies", clock=SystemClock(),
            tools=[ROOT / "tools", *([RUNS_TOOLS] if model else []), *announce(cfg.frameworks)],
            settings=worker_settings(api.url),
        )  # fmt: skip
        try:
            target.create_app_tables(rt)
            agent = Agent(rt, random.Random(cfg.seed + 1), kind=target.kind)
            driver = RunDriver(rt, random.Random(cfg.seed + 4), max_active=cfg.runs)
            supervisor = Supervisor(
                cfg.workers, target.worker_url, api.url, seed=cfg.seed + 2, kind=target.kind,
                model_url=model.base_url if model else None,
            )
            model_side.supervisor = supervisor
            if cfg.frameworks and model is not None:
                fw = Frameworks(
                    cfg.frameworks, rt, seed=cfg.seed, max_active=cfg.framework_runs,
                    supervisor=supervisor, model_side=model_side, worker_url=target.worker_url,
                    api_url=api.url, kind=target.kind, model_url=model.base_url,
                    logs=workdir / "starters",
                )  # fmt: skip
            if cfg.http:
                producer = _producer(rt, agent, target.url, workdir, cfg, backlog).start()
            outages = Outages(
                target, supervisor, producer, last_charge,
                [((i + 1) * cfg.min_kill_seconds / (len(cfg.restarts) + 1), mode)
                 for i, mode in enumerate(cfg.restarts)],
                down_seconds=cfg.down_seconds, recovery_bound=cfg.recovery_bound, log=log,
            )  # fmt: skip
            killing.set()
            stalls: list[tuple[float, float]] = []
            kill_phase_end = _kill_phase(
                agent, driver, fw, api, supervisor, outages, cfg, rng, log, backlog,
                writer_lock=writer_lock_path(target.worker_url), stalls=stalls,
            )
            killing.clear()
            if producer is not None:
                producer.stop()
            agent.decide_approvals(older_than=0.0)
            decided = agent.decided | (producer.decided if producer else {})
            bound = max(cfg.settle_seconds, target.settle_floor)
            if target.settle_floor > cfg.settle_seconds:
                log(f"settling for up to {bound:.0f} s: the backend's longest redelivery backoff")
            lost = _settle(rt, set(decided), bound, log)
            not_ended = driver.settle(bound, log) if cfg.runs else []
            fw_left = fw.settle(bound, log) if fw is not None else {}
            supervisor.close()
            counts, exit_codes = supervisor.counts, supervisor.exit_codes
            kill_log, freeze_log = supervisor.kill_log, supervisor.freeze_log
            supervisor = None
            run_calls = {c.task_id for s in driver.started.values()
                         for t in rt.run(s.run_id).turns for c in t.calls if c.task_id}  # fmt: skip
            if fw is not None:
                run_calls |= fw.charged_task_ids()
            outage_spans = [(o.stopped_at, o.back_at or time.monotonic()) for o in outages.done]
            outage_spans += stalls
            report = check_run(rt, api, decided, lost, charged_at, also_charged=run_calls)
            if cfg.runs:
                report.runs = check_runs(
                    rt, api, list(driver.started.values()), model_side.answers,
                    kills=kill_log, freezes=freeze_log,
                    outages=outage_spans,
                    dedup_mismatches=driver.dedup_mismatches, not_ended=not_ended,
                    problems=report.problems,
                )  # fmt: skip
                report.agent_retries += driver.retries
            if fw is not None:
                report.frameworks = fw.check(
                    api, model_side.answers, fw_left, kills=kill_log, freezes=freeze_log,
                    outages=outage_spans, problems=report.problems,
                )  # fmt: skip
            report.problems += [f"model: {e}" for e in model_side.script_errors[:5]]
            report.backend = target.kind
            report.kills = counts.kills
            report.kills_after_charge = counts.kills_after_charge
            report.kills_model_answering = counts.kills_model_answering
            report.kills_model_answered = counts.kills_model_answered
            report.kills_starter = counts.kills_starter
            report.freezes = counts.freezes
            report.workers_started = counts.started
            report.worker_exits = counts.exits
            if counts.exits:
                report.problems.append(
                    f"{counts.exits} worker(s) exited without being killed "
                    f"(exit codes {exit_codes[:10]})"
                )
            report.dedup_mismatches = agent.dedup_mismatches
            if agent.dedup_mismatches:
                report.problems.append(
                    f"{agent.dedup_mismatches} re-sent idempotency key(s) made another task"
                )
            report.agent_retries += agent.retries + (fw.retries() if fw is not None else 0)
            report.agent_retry_reasons = agent.retry_reasons
            report.restarts = [o.summary() for o in outages.done]
            report.problems += outage_problems(outages.done, http=producer is not None)
            if producer is not None:
                report.http_tasks = len(producer.decided)
                report.http_retries = producer.retried
                report.problems += [f"HTTP producer: {e}" for e in producer.errors[:10]]
                if not producer.alive:
                    report.problems.append("agentq serve exited during the run")
            report.kill_phase_seconds = round(kill_phase_end - started, 1)
        finally:
            if producer is not None:
                producer.close()
            if supervisor is not None:
                supervisor.close()
            rt.close()
            if model is not None:
                model.stop()
    return report


def _producer(
    rt: Runtime, agent: Agent, url: str, workdir: Path, cfg: ChaosConfig, backlog: threading.Event
) -> HttpProducer:
    def insert_order(order: str, amount: float) -> None:
        retrying(lambda: rt.transact(lambda tx: agent.insert_order(tx, order, amount)),
                 lambda _: None)  # fmt: skip

    return HttpProducer(url, workdir, insert_order, seed=cfg.seed, backlog=backlog)


def _kill_phase(
    agent: Agent,
    driver: RunDriver,
    fw: Frameworks | None,
    api: DemoAPI,
    sup: Supervisor,
    outages: Outages,
    cfg: ChaosConfig,
    rng: random.Random,
    log: Log,
    backlog: threading.Event,
    writer_lock: str | None = None,
    stalls: list[tuple[float, float]] | None = None,
) -> float:
    """The kill phase; freezes of a worker holding SQLite's ``writer_lock`` are
    appended to ``stalls`` (the database stopped meanwhile)."""
    stalls = [] if stalls is None else stalls
    start = time.monotonic()
    next_kill = start + rng.uniform(*cfg.kill_interval)
    # Freezes early enough in the phase that the frozen worker wakes before it ends.
    freezes = sorted(
        start + rng.uniform(1.0, max(cfg.min_kill_seconds - LEASE_SECONDS - 2, 1.0))
        for _ in range(cfg.freezes)
    )
    last_log = next_depth = start
    while True:
        now = time.monotonic()
        elapsed = now - start
        outages.due(elapsed)
        overtime = elapsed >= cfg.max_kill_seconds
        enough = overtime or (
            elapsed >= cfg.min_kill_seconds and sup.counts.kills >= cfg.target_kills
        )
        charge_killed = sup.counts.kills_after_charge >= 1 and (
            not (cfg.runs or fw) or sup.counts.kills_model_answering >= 1
        )
        restarted = not outages.pending
        if (enough and charge_killed and restarted) or (
            elapsed >= cfg.max_kill_seconds + cfg.charge_kill_wait and not outages.busy
        ):
            return now
        if freezes and now >= freezes[0] and sup.freeze_random(LEASE_SECONDS + 1):
            freezes.pop(0)
            pid, lo, hi = sup.freeze_log[-1]
            if writer_lock is not None and pid in writer_lock_holders(writer_lock):
                stalls.append((lo, hi))  # every writer waits for it: the database stopped
                log(f"froze worker {pid} holding SQLite's writer lock: every writer waits")
        if now >= next_kill and not overtime:
            sup.kill_random(cfg.min_life)
            next_kill = now + rng.uniform(*cfg.kill_interval)
        if now >= next_depth:
            if _backlog(agent.rt) > cfg.max_backlog:
                backlog.set()
            else:
                backlog.clear()
            next_depth = now + 1.0
        # The controller is never killed: any error of its decisions is a finding
        # (but for BackendUnavailable during a server restart: retried, see Agent).
        roll = rng.random()
        if backlog.is_set() and agent.orders:
            pass  # the workers are behind: no new refunds, and nothing else either
        elif roll < 0.55 or not agent.orders:
            agent.new_refund()
        elif roll < 0.62:
            agent.resend()
        elif roll < 0.70:
            agent.cancel_one()
        elif roll < 0.72:
            api.fail_next("/refunds", 503, retry_after=0.5)
        agent.decide_approvals(older_than=0.5)
        if cfg.runs:
            driver.step(may_start=not backlog.is_set() and not overtime)
        if fw is not None:
            fw.step(may_start=not backlog.is_set() and not overtime)
        if now - last_log >= 5:
            runs = f" runs={len(driver.started)}" if cfg.runs else ""
            log(f"[{elapsed:5.1f}s] kills={sup.counts.kills} tasks={len(agent.decided)}{runs}")
            last_log = now
        time.sleep(cfg.pace)


def _backlog(rt: Runtime) -> int:
    """Messages in the refunds queue (0 while the database is unreachable)."""
    try:
        return rt.backend.stats("payments").depth
    except (BackendUnavailable, TransactionAborted):
        return 0


def _settle(rt: Runtime, task_ids: set[str], bound: float, log: Log) -> set[str]:
    """Wait until every task in ``task_ids`` is final; returns those that are not."""
    started = time.monotonic()
    last_log = started
    open_ = set(task_ids)
    while True:
        open_ = {t.task_id for t in rt.tasks() if t.task_id in open_ and not t.done}
        now = time.monotonic()
        if not open_ or now - started > bound:
            if open_:
                log(f"{len(open_)} task(s) not final after {bound:g} s")
            return open_
        if now - last_log >= 10:
            log(f"settling: {len(open_)} task(s) not final yet")
            last_log = now
        time.sleep(1.0)
