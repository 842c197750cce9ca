"""Durable agent runs in a chaos run (``--runs``): the scripted model, and the driver.

:class:`ModelSide` is the scripted OpenAI-compatible model's script and hook. The
script answers each run's turn from the plan written in the run's input (1 to 3
``execute_refund`` calls over 1 or 2 turns, then a text answer: 2 or 3 turns),
with fresh call ids on every request as real providers mint them, and answers a
few requests 429 (with ``Retry-After``) or 500 instead. The hook runs once an
answer is computed, before it is sent: it notes every answer (run, turn, status,
the worker's pid from ``X-Chaos-Worker``, when) for the checks
(:mod:`tests.chaos.run_checks`) and, during the kill phase, SIGKILLs the worker
it is answering (a kill while the model answers) or, a few milliseconds later,
the worker that just got its answer (a kill between the answer and the turn's
commit).

:class:`RunDriver` is the user side: it starts runs (each with an idempotency
key; some started again later with the same key and input, as a restarted
process does, which must return the same run), cancels some at a random moment,
and approves or rejects (after a while) the calls of runs waiting for a human.
Like the refund agent it is never killed, and retries a call that failed with
``BackendUnavailable`` or ``TransactionAborted`` (a server restart, the
emulator's aborts): every one of its actions is safe to repeat.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from agentq import IllegalTransition, Runtime
from agentq.approvals import ApprovalStatus
from agentq.ledger import TaskStatus
from agentq.run_info import RunInfo, RunStatus
from agentq.testing import ModelRequest, RecordedRequest, Reply
from tests.chaos.agent import retrying
from tests.chaos.workers import RUNS_TOOLS, Supervisor, requesting_pid

__all__ = [
    "AGENT", "RUNS_TOOLS", "Answered", "ModelSide", "Retrying", "RunDriver", "StartedRun",
    "decide_approval", "make_plan", "new_plan",
]  # fmt: skip

AGENT = "chaos_runs"
OWNER = "chaos-user"  # the runs' owner: never their approver (four eyes)
T = TypeVar("T")


@dataclass(frozen=True)
class Answered:
    """One chat-completions request the model answered, as its hook saw it."""

    run_id: str | None
    turn: int  # X-AgentQ-Turn
    conversation_turn: int  # 1 + the assistant messages the request carried
    status: int
    pid: int | None  # the worker that asked
    asked_at: float  # monotonic: the request arrived (its worker was alive then)
    at: float  # monotonic: the answer is computed, about to be sent
    killed: str | None = None  # "answering" | "answered": the hook had it killed


def plan_of(text: str) -> list[list[float]]:
    """The plan a run's input carries: per tool-calling turn, the refunds' amounts."""
    plan = json.loads(text.split(" plan ", 1)[1])
    return [[float(a) for a in turn] for turn in plan]


class ModelSide:
    """The scripted model's script and hook (both called from its server threads)."""

    def __init__(
        self,
        seed: int,
        killing: threading.Event,
        *,
        p429: float = 0.06,
        p500: float = 0.04,
        kill_answering: float = 0.07,
        kill_answered: float = 0.07,
    ) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._killing = killing
        self._p429, self._p500 = p429, p500
        self._kill_answering, self._kill_answered = kill_answering, kill_answered
        self.supervisor: Supervisor | None = None
        #: Who else may be asking the model (the LangGraph starters): each kills
        #: the process with a pid if it is one of its own, and says so.
        self.killers: list[Callable[[int, str], bool]] = []
        #: Answers a driver wants killed whatever the dice say, in the kill phase
        #: or after it (the LangGraph driver: the first few asked by a worker
        #: resuming a graph, which may come only once the refunds settle).
        self.wanted: list[Callable[[ModelRequest, int], bool]] = []
        self.answers: list[Answered] = []
        self.script_errors: list[str] = []  # requests the script could not place

    def script(self, request: ModelRequest) -> Reply:
        with self._lock:
            roll = self._rng.random()
        if roll < self._p429:
            return Reply.error(429, retry_after=0.5, message="scripted rate limit")
        if roll < self._p429 + self._p500:
            return Reply.error(500, message="scripted server error")
        text = request.last_user_text() or ""
        try:
            plan = plan_of(text)
            tag = text.split(" ", 3)[2].rstrip(":")
        except (IndexError, ValueError) as exc:
            self.script_errors.append(f"{request.run_id}: {exc}")
            return Reply.text("I cannot read this run's plan.")
        turn = request.turn
        if turn != request.run_turn:
            self.script_errors.append(
                f"{request.run_id}: X-AgentQ-Turn {request.run_turn}, but the conversation "
                f"holds {turn - 1} assistant message(s)"
            )
        if turn <= len(plan):
            calls = [("execute_refund", {"order_id": f"{tag}-t{turn}-c{i}", "amount": amount,
                                         "reason": f"chaos run {tag}"})
                     for i, amount in enumerate(plan[turn - 1])]  # fmt: skip
            return Reply.tool_calls(*calls)
        return Reply.text(f"Done with {tag}: {len(request.last_tool_results())} result(s).")

    def _kill(self, pid: int, reason: str) -> bool:
        sup = self.supervisor
        if sup is not None and sup.kill_pid(pid, reason=reason):
            return True
        return any(kill(pid, reason) for kill in self.killers)

    def hook(self, request: ModelRequest, record: RecordedRequest) -> None:
        pid = requesting_pid(request.headers)
        killed: str | None = None
        sup = self.supervisor
        answered = sup is not None and pid is not None and record.status == 200
        # An answer a driver wants killed kills, in the kill phase or after it.
        if answered and pid is not None and any(want(request, pid) for want in self.wanted):
            if self._kill(pid, "model_answering"):
                killed = "answering"
        elif answered and pid is not None and sup is not None and self._killing.is_set():
            with self._lock:
                roll = self._rng.random()
                delay = self._rng.uniform(0.002, 0.05)
            # Until one worker died while the model answered it, every answer kills.
            first = sup.counts.kills_model_answering == 0
            if first or roll < self._kill_answering:
                if self._kill(pid, "model_answering"):
                    killed = "answering"
            elif roll < self._kill_answering + self._kill_answered:
                killed = "answered"
                timer = threading.Timer(delay, self._kill, (pid, "model_answered"))
                timer.daemon = True
                timer.start()
        now = time.monotonic()
        asked = now - max(0.0, time.time() - record.at.timestamp())
        entry = Answered(request.run_id, request.run_turn, request.turn, record.status, pid,
                         asked, now, killed)  # fmt: skip
        with self._lock:
            self.answers.append(entry)


def make_plan(rng: random.Random, needs_approval: bool) -> list[list[float]]:
    """A run's plan: 1 to 3 refunds over 1 or 2 turns; with ``needs_approval``,
    one of them above 100 (a human decides it)."""
    calls = rng.randint(1, 3)
    turns = 1 if calls == 1 else rng.randint(1, 2)
    sizes = [calls] if turns == 1 else [1, calls - 1] if calls == 2 else \
        rng.choice([[1, 2], [2, 1]])  # fmt: skip
    plan = [[round(rng.uniform(5, 100), 2) for _ in range(k)] for k in sizes]
    if needs_approval:
        t = rng.randrange(len(plan))
        plan[t][rng.randrange(len(plan[t]))] = round(rng.uniform(150, 900), 2)
    return plan


def new_plan(rng: random.Random, tag: str, approval_share: float) -> tuple[list[list[float]], str]:
    """A plan (:func:`make_plan`, a large refund in ``approval_share`` of them)
    and the input that carries it, for the run or thread tagged ``tag``."""
    plan = make_plan(rng, rng.random() < approval_share)
    return plan, f"Chaos run {tag}: refund per plan {json.dumps(plan)}"


def decide_approval(rt: Runtime, approval_id: str, yes: bool) -> None:
    """Approve or reject, unless an earlier attempt whose answer was lost did."""
    status = rt.approval(approval_id).status
    if status not in (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED):
        return
    if yes:
        rt.approve(approval_id, by="chaos-approver")
    else:
        rt.reject(approval_id, by="chaos-approver", note="not eligible")


class Retrying:
    """``_retry(fn)``: :func:`tests.chaos.agent.retrying`, counted in ``retries``."""

    retries: int

    def _retry(self, fn: Callable[[], T]) -> T:
        def count(_: Exception) -> None:
            self.retries += 1

        return retrying(fn, count)


@dataclass
class StartedRun:
    """One run the driver started, and what it did to it later."""

    run_id: str
    tag: str
    key: str
    input: str
    plan: list[list[float]]
    started_at: float
    restart_at: float | None = None  # when to start it again with the same key
    restarted: int = 0
    cancel_at: float | None = None  # when to cancel it
    cancelled: bool = False  # cancel_run returned: the run must end cancelled
    cancel_saw: str | None = None  # why a cancel was refused (the run had ended)
    approved: int = 0
    rejected: int = 0
    awaiting_since: float | None = None  # first seen awaiting approval
    final: RunInfo | None = None  # its record once it ended


@dataclass
class RunDriver(Retrying):
    """The user side of the runs: start, restart by key, cancel, approve or reject."""

    rt: Runtime
    rng: random.Random
    max_active: int = 12
    agent: str = AGENT  # the agent whose runs it starts
    prefix: str = "run"  # of the runs' tags (and so of their idempotency keys)
    approve_after: tuple[float, float] = (0.5, 3.0)
    cancel_share: float = 0.12
    restart_share: float = 0.3
    approval_share: float = 0.35
    started: dict[str, StartedRun] = field(default_factory=dict)
    dedup_mismatches: list[str] = field(default_factory=list)
    retries: int = 0
    n: int = 0
    _next_poll: float = 0.0
    _approve_delay: dict[str, float] = field(default_factory=dict)

    @property
    def active(self) -> list[StartedRun]:
        return [r for r in self.started.values() if r.final is None]

    def start_one(self) -> StartedRun:
        tag = f"{self.prefix}{self.n:05}"
        self.n += 1
        plan, text = new_plan(self.rng, tag, self.approval_share)
        key = f"chaos-run:{tag}"
        info = self._retry(
            lambda: self.rt.start_run(self.agent, text, idempotency_key=key, by=OWNER)
        )
        now = time.monotonic()
        run = StartedRun(info.run_id, tag, key, text, plan, now)
        if self.rng.random() < self.restart_share:
            run.restart_at = now + self.rng.uniform(0.1, 8.0)
        if self.rng.random() < self.cancel_share:
            run.cancel_at = now + self.rng.uniform(0.0, 6.0)
        self.started[run.run_id] = run
        return run

    def restart(self, run: StartedRun) -> None:
        """The user's process started again: the same key and input, the same run."""
        info = self._retry(
            lambda: self.rt.start_run(self.agent, run.input, idempotency_key=run.key, by=OWNER)
        )
        run.restarted += 1
        run.restart_at = None
        if info.run_id != run.run_id:
            self.dedup_mismatches.append(f"{run.key}: {run.run_id} then {info.run_id}")

    def cancel(self, run: StartedRun) -> None:
        run.cancel_at = None
        attempts = 0

        def once() -> RunInfo:
            nonlocal attempts
            attempts += 1
            if attempts > 1:  # an earlier attempt may have committed, its answer lost
                seen = self.rt.run(run.run_id)
                if seen.status is RunStatus.CANCELLED:
                    return seen
            return self.rt.cancel_run(run.run_id, "the user withdrew it", by=OWNER)

        try:
            self._retry(once)
            run.cancelled = True
        except IllegalTransition as exc:  # it had ended: the lifecycle refuses
            run.cancel_saw = str(exc)

    def _decide(self, run: StartedRun, info: RunInfo, approve: float = 0.75) -> None:
        for task_id in info.pending:
            task = self._retry(lambda t=task_id: self.rt.task(t))  # type: ignore[misc]
            if task.status is not TaskStatus.AWAITING_APPROVAL or task.approval_id is None:
                continue
            yes = self.rng.random() < approve
            self._retry(lambda a=task.approval_id, y=yes: decide_approval(self.rt, a, y))  # type: ignore[misc]
            run.approved += yes
            run.rejected += not yes

    def poll(self, now: float, *, approve_now: bool = False) -> None:
        """Read the active runs: note those that ended, decide ripe approvals."""
        for run in self.active:
            info = self._retry(lambda r=run: self.rt.run(r.run_id))  # type: ignore[misc]
            if info.done:
                run.final = info
                continue
            if info.status is not RunStatus.AWAITING_APPROVAL:
                run.awaiting_since = None
                continue
            if run.awaiting_since is None:
                run.awaiting_since = now
                self._approve_delay[run.run_id] = self.rng.uniform(*self.approve_after)
            if approve_now or now - run.awaiting_since >= self._approve_delay[run.run_id]:
                self._decide(run, info)
                run.awaiting_since = None

    def step(self, *, may_start: bool) -> None:
        """One action of the kill phase's loop."""
        now = time.monotonic()
        for run in list(self.started.values()):
            if run.restart_at is not None and now >= run.restart_at:
                self.restart(run)
            if run.cancel_at is not None and now >= run.cancel_at:
                if run.final is None:
                    self.cancel(run)
                else:
                    run.cancel_at = None
        if now >= self._next_poll:
            self.poll(now)
            self._next_poll = now + 0.5
        if may_start and len(self.active) < self.max_active and self.rng.random() < 0.5:
            self.start_one()

    def settle(self, bound: float, log: Callable[[str], None]) -> list[str]:
        """After the kill phase: every due restart made, every approval decided at
        once, until every run ended; returns the ids of those that did not."""
        for run in self.started.values():
            if run.restart_at is not None:
                self.restart(run)
            run.cancel_at = None
        started = last_log = time.monotonic()
        while True:
            now = time.monotonic()
            self.poll(now, approve_now=True)
            left = [r.run_id for r in self.active]
            if not left or now - started > bound:
                if left:
                    log(f"{len(left)} run(s) not ended after {bound:g} s")
                return left
            if now - last_log >= 10:
                log(f"settling: {len(left)} run(s) not ended yet")
                last_log = now
            time.sleep(0.5)
