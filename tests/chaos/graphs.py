"""LangGraph threads in a chaos run (``--frameworks langgraph``): the user's
process that starts one, and the driver that starts, kills and restarts them.

The graph is :mod:`tests.chaos.graph_tools.chaos_graph`'s (every worker loads
that folder: its continuation resumes the graph). Each thread's input carries a
plan, as the core runs' do (:mod:`tests.chaos.runs`), which the scripted model
follows: 1 to 3 refunds over 1 or 2 tool-calling turns, some above 100 (a
human decides them).

:func:`starter` is what a user runs: a process (forked from the supervisor's
forkserver) that starts the thread, or carries on one whose user's process died
mid-run (``AgentQSaver.start_or_carry_on``; half the threads at
``durability="sync"``, half at LangGraph's default, ``"async"``), and exits
once the graph waits for its refunds (or ends). From then on the graph belongs
to the workers: the continuation resumes it. :class:`GraphDriver` is the user
side: it starts threads, SIGKILLs starters at random (and the model's hook
kills those it answers), starts a dead starter's thread again (same thread id,
same input) as a user would, now and then also one a worker carries on (an
impatient user: the starter must leave it to the worker), and approves or
rejects the large refunds after a while.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from agentq import Runtime
from agentq.approvals import ApprovalStatus
from tests.chaos.runs import Retrying, decide_approval, new_plan
from tests.chaos.workers import (
    FRAMEWORK_TOOLS,
    MODEL_URL_VARIABLE,
    ROOT,
    Supervisor,
    worker_settings,
)

__all__ = ["GRAPH_TOOLS", "GraphDriver", "StartedGraph", "starter"]

GRAPH_TOOLS = FRAMEWORK_TOOLS["langgraph"][0]
#: Exit status of a starter that met the database down (a user starts it again).
UNAVAILABLE = 75


def thread_config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def graph_of(rt: Runtime, saver: Any = None) -> Any:
    """The chaos graph over ``saver`` (else a new saver on ``rt``)."""
    from agentq.adapters.langgraph_checkpoint import AgentQSaver
    from tests.chaos.graph_tools.chaos_graph import build

    return build(saver or AgentQSaver(rt))


def ended(state: Any) -> bool:
    """The thread ran to its end. ``next`` alone does not say it: a process that
    died after a node's writes were stored and before the checkpoint that ends
    the step leaves a state whose ``next`` is empty, its node among ``tasks``
    (with its writes): ``invoke(None)`` carries that thread on."""
    return bool(state.values) and not state.next and not state.tasks


def durability_of(thread_id: str) -> str:
    """How the thread's starter stores its steps: half the threads at LangGraph's
    default (``"async"``: a node's agentq work waits for its step's checkpoint,
    stored in the background, which a kill may cut short), half ``"sync"``; a
    thread's restarts store them as its first start did."""
    return "async" if sum(map(ord, thread_id)) % 2 else "sync"


def owned_by_workers(values: dict[str, Any]) -> bool:
    """The graph got past a wait (a tool message): the workers carry it on."""
    return any(m.get("role") == "tool" for m in values.get("messages", []))


def starter(db_url: str, api_url: str, kind: str, model_url: str, logs: str,
            thread_id: str, text: str) -> None:  # fmt: skip
    """A user's process: start ``thread_id`` with ``text``, or carry it on from its
    last checkpoint (``AgentQSaver.start_or_carry_on``); exit when it waits, ends
    or a worker's continuation carries it on."""
    from agentq import SystemClock
    from agentq.errors import BackendUnavailable, TransactionAborted
    from tests.chaos.workers import refund_bot_tools

    os.environ[MODEL_URL_VARIABLE] = model_url
    try:
        tools = refund_bot_tools(kind)
        tools.load_dir(GRAPH_TOOLS)
        with Runtime(db_url, tools=tools, policies=ROOT / "policies", clock=SystemClock(),
                     settings=worker_settings(api_url)) as rt:  # fmt: skip
            from agentq.adapters.langgraph_checkpoint import AgentQSaver

            saver = AgentQSaver(rt)
            start = {"messages": [{"role": "user", "content": text}]}
            saver.start_or_carry_on(graph_of(rt, saver), thread_config(thread_id), start,
                                    durability=durability_of(thread_id))  # fmt: skip
    except (BackendUnavailable, TransactionAborted):
        sys.exit(UNAVAILABLE)
    except Exception:
        Path(logs, f"starter-{os.getpid()}.err").write_text(traceback.format_exc())
        sys.exit(1)


@dataclass
class StartedGraph:
    """One thread the driver started, and what became of it."""

    thread_id: str
    tag: str
    input: str
    plan: list[list[float]]
    proc: BaseProcess | None = None
    born: float = 0.0
    starts: int = 0
    approved: int = 0
    rejected: int = 0
    awaiting_since: float | None = None
    final: str | None = None  # "done", or "rejected": waiting on a human's no


@dataclass
class GraphDriver(Retrying):
    """The user side of the LangGraph threads (module docs)."""

    rt: Runtime
    rng: random.Random
    supervisor: Supervisor
    args: tuple[str, str, str, str, str]  # db url, api url, backend, model url, logs dir
    max_active: int = 6
    approve_after: tuple[float, float] = (0.5, 3.0)
    kill_every: tuple[float, float] = (1.0, 4.0)
    approval_share: float = 0.35
    #: The share of polls that start again a thread a worker carries on.
    impatient_share: float = 0.1
    started: dict[str, StartedGraph] = field(default_factory=dict)
    starter_failures: list[str] = field(default_factory=list)
    unavailable: int = 0  # starters that met the database down
    resumed_kills_wanted: int = 3  # the first answers to a worker resuming a graph kill it
    resumed_kills: int = 3  # of those, how many are still to come
    retries: int = 0
    n: int = 0
    _next_poll: float = 0.0
    _next_kill: float = 0.0
    _delay: dict[str, float] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _resumed_killed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        # The workers' supervisor's lock: a start of either kind of process polls
        # both kinds (Supervisor.process_lock).
        self._lock = self.supervisor.process_lock
        self._ctx = multiprocessing.get_context("forkserver")
        self._graph = graph_of(self.rt)

    @property
    def active(self) -> list[StartedGraph]:
        return [g for g in self.started.values() if g.final is None]

    def _spawn(self, g: StartedGraph) -> None:
        proc = self._ctx.Process(target=starter, args=(*self.args, g.thread_id, g.input),
                                 daemon=True)  # fmt: skip
        with self._lock:
            proc.start()
            g.proc, g.born = proc, time.monotonic()
        g.starts += 1

    def start_one(self) -> None:
        tag = f"lg{self.n:05}"
        self.n += 1
        plan, text = new_plan(self.rng, tag, self.approval_share)
        g = StartedGraph(f"chaos-graph:{tag}", tag, text, plan)
        self.started[g.thread_id] = g
        self._spawn(g)

    def kill_pid(self, pid: int, reason: str) -> bool:
        """SIGKILL the starter with this pid if it is alive (the model's hook)."""
        with self._lock:
            for g in self.started.values():
                if g.proc is not None and g.proc.pid == pid and g.proc.is_alive():
                    g.proc.kill()
                    self.supervisor.note_kill(pid, reason)
                    return True
        return False

    def wanted(self, request: Any, pid: int) -> bool:
        """The scripted model's hook asks: kill the worker ``pid`` it answers? Yes
        for the first few requests of a graph resumed by a worker (turn 2 and
        later), so that every run kills a worker between a waiting node's
        writes and the graph's next wait or end."""
        with self._lock:
            starter = any(g.proc is not None and g.proc.pid == pid for g in self.started.values())
            thread = str(request.run_id)
            if self.resumed_kills <= 0 or starter or request.run_turn < 2 or \
                    not thread.startswith("chaos-graph:") or \
                    thread in self._resumed_killed:  # fmt: skip
                return False
            self._resumed_killed.add(thread)  # one per thread: its redelivery must get through
            self.resumed_kills -= 1
            return True

    def _kill_random(self, now: float) -> None:
        with self._lock:
            alive = [g for g in self.started.values() if g.proc is not None
                     and g.proc.is_alive() and now - g.born > 0.3]  # fmt: skip
        if alive:
            g = self.rng.choice(alive)
            if g.proc is not None and g.proc.pid is not None:
                self.kill_pid(g.proc.pid, "starter")

    def _reap(self, g: StartedGraph) -> None:
        with self._lock:
            proc = g.proc
            if proc is None or proc.is_alive():
                return
            proc.join()
            code, pid = proc.exitcode, proc.pid
            proc.close()
            g.proc = None
        if code == UNAVAILABLE:
            self.unavailable += 1
        elif code not in (0, -9):
            err = Path(self.args[4], f"starter-{pid}.err")
            why = err.read_text().strip().splitlines()[-1:] if err.exists() else []
            self.starter_failures.append(f"{g.thread_id}: exit {code} {why}")

    def _decide(self, g: StartedGraph, task_ids: list[str], approve: float = 0.8) -> None:
        for task_id in task_ids:
            task = self._retry(lambda t=task_id: self.rt.task(t))
            if task.approval_id is None:
                continue
            yes = self.rng.random() < approve
            self._retry(lambda a=task.approval_id, y=yes: decide_approval(self.rt, a, y))
            g.approved += yes
            g.rejected += not yes

    def poll(self, now: float, *, approve_now: bool = False) -> None:
        """Reap starters, restart the threads whose user's process died mid-run
        (and now and then one a worker carries on), note those that ended,
        decide ripe approvals."""
        pending: dict[str, list[str]] = {}
        for a in self._retry(lambda: self.rt.approvals(ApprovalStatus.PENDING)):
            task = self._retry(lambda t=a.task_id: self.rt.task(t))
            order = str(task.args.get("order_id", ""))
            if order.startswith("lg"):
                pending.setdefault(f"chaos-graph:{order.split('-')[0]}", []).append(a.task_id)
        for g in self.active:
            self._reap(g)
            state = self._retry(lambda g=g: self._graph.get_state(thread_config(g.thread_id)))
            if ended(state):
                g.final = "done"
                continue
            if g.rejected and state.interrupts and g.thread_id not in pending:
                g.final = "rejected"  # its continuation is cancelled: a human said no
                continue
            impatient = self.rng.random() < self.impatient_share
            if g.proc is None and not state.interrupts and (
                    impatient or not owned_by_workers(state.values)):  # fmt: skip
                self._spawn(g)  # the user starts it again: same thread, same input
            if g.thread_id not in pending:
                g.awaiting_since = None
                continue
            if g.awaiting_since is None:
                g.awaiting_since = now
                self._delay[g.thread_id] = self.rng.uniform(*self.approve_after)
            if approve_now or now - g.awaiting_since >= self._delay[g.thread_id]:
                self._decide(g, pending[g.thread_id])
                g.awaiting_since = None

    def step(self, *, may_start: bool, killing: bool = True) -> None:
        """One action of the kill phase's loop."""
        now = time.monotonic()
        if killing and now >= self._next_kill:
            if self._next_kill:
                self._kill_random(now)
            self._next_kill = now + self.rng.uniform(*self.kill_every)
        if now >= self._next_poll:
            self.poll(now)
            self._next_poll = now + 0.5
        if may_start and len(self.active) < self.max_active and self.rng.random() < 0.5:
            self.start_one()

    def settle(self, bound: float, log: Callable[[str], None]) -> list[str]:
        """After the kill phase: every approval decided at once, every dead
        starter's thread started again, until every thread ended (or waits on a
        human's no); returns the threads that did not."""
        started = last_log = time.monotonic()
        while True:
            now = time.monotonic()
            self.poll(now, approve_now=True)
            left = [g.thread_id for g in self.active]
            if not left or now - started > bound:
                if left:
                    log(f"{len(left)} LangGraph thread(s) not ended after {bound:g} s")
                for g in self.started.values():
                    if g.proc is not None:
                        g.proc.kill()
                        self._reap(g)
                return left
            if now - last_log >= 10:
                log(f"settling: {len(left)} LangGraph thread(s) not ended yet")
                last_log = now
            time.sleep(0.5)
