"""Worker processes for the chaos run, and the supervisor that kills and restarts them.

Workers are forked from a ``forkserver`` (a single-threaded process that has already
imported agentq), so a restart costs milliseconds instead of a fresh interpreter's
imports: on a loaded 2-core machine that is what makes 50 kills fit in a bounded run.

Each worker serves every queue of the refund bot (``tools/``, ``policies/``) with the
real ``execute_refund`` tool. Its HTTP transport tags each request with the worker's
pid (``X-Chaos-Worker``), so the payments server can tell the supervisor whom to kill
right after it applied a charge, before the answer (and so the completion) exists.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import httpx

from agentq.tools import ToolRegistry
from tests.chaos.appsql import portable_refund_tool

ROOT = Path(__file__).resolve().parents[2]
PID_HEADER = "X-Chaos-Worker"
#: The tools folder that defines the chaos agent (``--runs``), and the variable
#: its model's URL is read from (``runs_tools/chaos_agent.py``).
RUNS_TOOLS = Path(__file__).resolve().parent / "runs_tools"
MODEL_URL_VARIABLE = "AGENTQ_CHAOS_MODEL_URL"
#: The frameworks whose agents the workers load too (``--frameworks``), comma-separated.
FRAMEWORKS_VARIABLE = "AGENTQ_CHAOS_FRAMEWORKS"
#: Each framework's tools folder, and the queue its continuations use (if any).
FRAMEWORK_TOOLS = {
    "langgraph": (Path(__file__).resolve().parent / "graph_tools", "langgraph"),
    "openai-agents": (Path(__file__).resolve().parent / "sdk_tools", None),
}
#: What each framework's workers import, preloaded by the forkserver: a worker
#: killed every second must not spend its life importing them again.
FRAMEWORK_PRELOAD = {
    "langgraph": ["langgraph.graph", "agentq.adapters.langgraph_checkpoint"],
    "openai-agents": ["agents", "openai", "agentq.adapters.openai_agents_durable"],
}
#: A directory: each worker logs (INFO) to ``worker-<pid>.log`` in it.
WORKER_LOGS_VARIABLE = "AGENTQ_CHAOS_WORKER_LOGS"


class _PidTaggingTransport(httpx.BaseTransport):
    """Adds this process's pid to every request (the server reports it back)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers[PID_HEADER] = str(os.getpid())
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def worker_settings(api_url: str) -> dict[str, str]:
    """Settings the refund bot's tools read (API base URLs, the orders table)."""
    return {
        "payments_url": api_url,
        "notifications_url": api_url,
        "shipping_url": api_url,
        "orders_table": "orders",
    }


def refund_bot_tools(kind: str) -> ToolRegistry:
    """The refund bot's tools, ``execute_refund``'s completion SQL in ``kind``'s dialect."""
    loaded = ToolRegistry()
    loaded.load_dir(ROOT / "tools")
    return ToolRegistry(
        portable_refund_tool(t, kind) if t.name == "execute_refund" else t for t in loaded
    )


#: The queues a worker serves, by backend (unlisted: every queue of the refund
#: bot). On the emulator each open RECEIVE costs the stand-in a read-write
#: transaction per poll, and the emulator runs one at a time: there workers serve
#: only the queues the run puts tasks on (refunds, and approval notices).
QUEUES = {"spanner": ["payments", "notifications"]}


#: The queue of the chaos agent's turns (``--runs``).
TURNS_QUEUE = "agent_turns"


def serve(db_url: str, api_url: str, kind: str, model_url: str | None = None) -> None:
    """Entry point of one worker process: serve every queue until SIGTERM. With
    ``model_url`` (``--runs``), the chaos agent's tools folder is loaded too, its
    model at that URL (:mod:`tests.chaos.runs_tools.chaos_agent`)."""
    from agentq import Runtime, SystemClock

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    logs = os.environ.get(WORKER_LOGS_VARIABLE)
    if logs:  # each worker's INFO log (its commits, stale completions, retries)
        logging.basicConfig(
            filename=str(Path(logs) / f"worker-{os.getpid()}.log"), level=logging.INFO,
            format="%(created).3f %(levelname)s %(name)s %(message)s",
        )  # fmt: skip
    tools = refund_bot_tools(kind)
    queues = QUEUES.get(kind)
    if model_url is not None:
        os.environ[MODEL_URL_VARIABLE] = model_url
        tools.load_dir(RUNS_TOOLS)
        queues = None if queues is None else [*queues, TURNS_QUEUE]
        for name in filter(None, os.environ.get(FRAMEWORKS_VARIABLE, "").split(",")):
            folder, queue = FRAMEWORK_TOOLS[name]
            tools.load_dir(folder)
            if queues is not None and queue is not None:
                queues.append(queue)
    rt = Runtime(
        db_url,
        tools=tools,
        policies=ROOT / "policies",
        clock=SystemClock(),
        settings=worker_settings(api_url),
        http_transport=_PidTaggingTransport(httpx.HTTPTransport()),
    )
    try:
        # No prefetch: a killed worker strands only the tasks it is running, each of
        # which then waits out its 10 s lease before another worker gets it.
        worker = rt.worker(concurrency=4, prefetch=0, receive_timeout=0.2, queues=queues)
        worker.run(stop)
    finally:
        rt.close()


@dataclass
class KillCounts:
    """What the supervisor did."""

    started: int = 0
    kills: int = 0
    kills_after_charge: int = 0
    kills_model_answering: int = 0  # from the model's hook, before its answer is sent
    kills_model_answered: int = 0  # a few ms after the model answered (before the commit)
    kills_starter: int = 0  # a LangGraph thread's user process, at random (--frameworks)
    freezes: int = 0
    exits: int = 0  # workers that died without being killed (a finding)


class Supervisor:
    """Keeps ``n`` worker processes alive and SIGKILLs them at random.

    ``kill_random`` kills one that has lived at least ``min_life`` seconds (a kill
    during start-up is allowed too, but a worker must get some work done between
    kills); ``kill_pid`` kills a given worker (the payments server's hook). A
    background thread restarts every worker that died, until :meth:`close`.
    """

    def __init__(
        self, n: int, db_url: str, api_url: str, *, seed: int, kind: str,
        model_url: str | None = None,
    ) -> None:  # fmt: skip
        self._ctx = multiprocessing.get_context("forkserver")
        frameworks = filter(None, os.environ.get(FRAMEWORKS_VARIABLE, "").split(","))
        preload = [m for f in frameworks for m in FRAMEWORK_PRELOAD[f]]
        self._ctx.set_forkserver_preload(["agentq.runtime", "agentq.executor", __name__, *preload])
        self._args = (db_url, api_url, kind, model_url)
        # Re-entrant, and shared with the LangGraph starters' driver (tests.chaos.graphs):
        # see process_lock.
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._procs: list[tuple[BaseProcess, float]] = []
        self._doomed: set[int] = set()  # pids already killed (not yet reaped)
        self._frozen: list[tuple[int, float]] = []  # (pid, when to SIGCONT it)
        self.counts = KillCounts()
        #: Every kill as (monotonic time, pid), and every freeze as (pid, from, to).
        self.kill_log: list[tuple[float, int]] = []
        self.freeze_log: list[tuple[int, float, float]] = []
        self.exit_codes: list[int | None] = []  # of the workers counted in counts.exits
        #: While set, nothing is killed or frozen (a database server restart is
        #: under way: the workers alive now must come back by themselves).
        self.paused = threading.Event()
        self._closing = threading.Event()
        with self._lock:
            for _ in range(n):
                self._procs.append(self._spawn())
        self._thread = threading.Thread(target=self._restart_loop, name="chaos-restarts")
        self._thread.start()

    @property
    def process_lock(self) -> threading.RLock:
        """Held around every start, poll and join of the run's processes (these
        workers and the LangGraph starters): ``Process.start`` polls every child
        of this process (``multiprocessing.process._cleanup``), and a forkserver
        child's exit status can be read once, so of two polls at once the second
        reads EOF and reports exit code 255 for a process that exited normally."""
        return self._lock

    def _spawn(self) -> tuple[BaseProcess, float]:
        proc = self._ctx.Process(target=serve, args=self._args, daemon=True)
        proc.start()
        self.counts.started += 1
        return proc, time.monotonic()

    def _restart_loop(self) -> None:
        while not self._closing.wait(0.02):
            with self._lock:
                self._thaw(time.monotonic())
                for i, (proc, _) in enumerate(self._procs):
                    if not proc.is_alive():
                        proc.join()
                        if proc.pid not in self._doomed:
                            self.counts.exits += 1
                            self.exit_codes.append(proc.exitcode)
                        self._doomed.discard(proc.pid or 0)
                        proc.close()
                        self._procs[i] = self._spawn()

    def _thaw(self, now: float) -> None:
        for pid, until in list(self._frozen):
            if until <= now or self._closing.is_set():
                self._frozen.remove((pid, until))
                _signal(pid, signal.SIGCONT)

    def _alive(self) -> list[tuple[BaseProcess, float]]:
        return [(p, b) for p, b in self._procs if p.is_alive() and p.pid not in self._doomed]

    def _kill(self, proc: BaseProcess) -> None:
        proc.kill()
        self._doomed.add(proc.pid or 0)
        self.counts.kills += 1
        self.kill_log.append((time.monotonic(), proc.pid or 0))

    def kill_random(self, min_life: float) -> bool:
        """SIGKILL one worker that has lived ``min_life`` s; False if none has."""
        now = time.monotonic()
        with self._lock:
            if self.paused.is_set():
                return False
            ripe = [p for p, born in self._alive() if now - born >= min_life]
            if not ripe:
                return False
            self._kill(self._rng.choice(ripe))
            return True

    def kill_pid(self, pid: int, reason: str = "after_charge") -> bool:
        """SIGKILL the worker with this pid, if it is one of ours and alive;
        ``reason`` names the :class:`KillCounts` field it counts in (``kills_``
        and the reason)."""
        with self._lock:
            if self.paused.is_set():
                return False
            for proc, _ in self._alive():
                if proc.pid == pid:
                    self._kill(proc)
                    field_name = f"kills_{reason}"
                    setattr(self.counts, field_name, getattr(self.counts, field_name) + 1)
                    return True
        return False

    def note_kill(self, pid: int, reason: str) -> None:
        """Count a kill of another process of the run (a LangGraph starter) as
        this supervisor's: in :attr:`counts` (``kills_`` and ``reason``) and
        :attr:`kill_log`, which the checks read."""
        with self._lock:
            self.counts.kills += 1
            field_name = f"kills_{reason}"
            setattr(self.counts, field_name, getattr(self.counts, field_name) + 1)
            self.kill_log.append((time.monotonic(), pid))

    def freeze_random(self, seconds: float) -> bool:
        """SIGSTOP one worker for ``seconds`` (past its leases), then SIGCONT it.

        Its leases expire meanwhile and other workers run its tasks again; when it
        wakes, its completions must be refused, not recorded a second time.
        """
        with self._lock:
            if self.paused.is_set():
                return False
            frozen = {pid for pid, _ in self._frozen}
            candidates = [p for p, _ in self._alive() if p.pid not in frozen]
            if not candidates:
                return False
            proc = self._rng.choice(candidates)
            _signal(proc.pid or 0, signal.SIGSTOP)
            now = time.monotonic()
            self._frozen.append((proc.pid or 0, now + seconds))
            self.freeze_log.append((proc.pid or 0, now, now + seconds))
            self.counts.freezes += 1
            return True

    def alive_since(self) -> dict[int, float]:
        """The workers alive now, not doomed and not frozen: pid -> when started."""
        with self._lock:
            frozen = {pid for pid, _ in self._frozen}
            return {p.pid: born for p, born in self._alive() if p.pid and p.pid not in frozen}

    def close(self, timeout: float = 20.0) -> None:
        """Stop restarting; SIGTERM every worker, SIGKILL what has not exited in time."""
        self._closing.set()
        self._thread.join(timeout)
        with self._lock:
            self._thaw(time.monotonic())  # a stopped process would not see SIGTERM
            procs = [p for p, _ in self._procs]
            self._procs = []
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in procs:
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            proc.close()


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass  # it died meanwhile (killed, or exited)


def requesting_pid(headers: Mapping[str, Any]) -> int | None:
    """The worker pid a request to the payments server came from."""
    for name, value in headers.items():
        if name.lower() == PID_HEADER.lower():
            try:
                return int(value)
            except ValueError:
                return None
    return None
