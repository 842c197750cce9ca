"""``agentq bench``: throughput and latency on a fresh database, beside the disk's floor.

Every figure is a median over ``repeats`` runs with min and max, because these
machines are noisy. Measured, at the chosen durability:

* ``raw_commits_per_s`` — single-row SQLite commits on the same disk: the floor
  every other figure should be read against;
* ``queue_send_per_s`` / ``queue_recv_ack_per_s`` — the queue layer alone: one
  message sent per transaction; leasing a batch and acking it in one transaction;
* ``decisions_per_s`` — transactions that each write one application row and
  enqueue one task, one caller;
* ``enqueue_action_per_s`` — the idempotent one-call API, one caller;
* ``decisions_per_s_<n>_callers`` / ``enqueue_action_per_s_<n>_callers`` — the
  same from ``n`` threads at once, whose transactions share commits;
* ``tasks_per_s_<n>w`` — a burst of no-op tasks (enqueued in one transaction)
  leased, run and completed (result + ledger + ack) by ``n`` worker processes;
* ``latency_*`` — commit of an enqueue to handler start, for an idle worker in
  the same process and in another process (p50 / p99 / max, ms);
* ``idle_worker_cpu_percent`` — CPU of an idle worker process.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentq.errors import ConfigError

__all__ = ["format_table", "run_bench"]

_NOOP_TOOL = """
import time
from pydantic import BaseModel
from agentq import ToolContext, tool

class NoopArgs(BaseModel):
    n: int = 0
    pad: str = ""

class NoopResult(BaseModel):
    started: float

@tool(queue="bench")
def noop(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())
"""

_WORKER = """
import sys, signal, threading
from agentq import Runtime
url, tools, concurrency, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rt = Runtime(url, tools=tools)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
w = rt.worker(concurrency=concurrency, batch_size=batch, queues=["bench"])
print("ready", flush=True)
w.run(stop)
rt.close()
"""


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class _Env:
    """A fresh database file and the no-op tool, in a temporary directory."""

    def __init__(self, root: Path, durability: str, name: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
        self.tools = self.dir / "tools"
        self.tools.mkdir()
        (self.tools / "noop.py").write_text(_NOOP_TOOL)
        self.path = self.dir / "bench.db"
        self.url = f"sqlite:///{self.path}?durability={durability}"

    def runtime(self) -> Any:
        from agentq.runtime import Runtime

        return Runtime(self.url, tools=self.tools)


def _raw_commits(env: _Env, n: int, durability: str) -> float:
    conn = sqlite3.connect(env.path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={durability.upper()}")
    conn.execute("CREATE TABLE raw (id INTEGER PRIMARY KEY, v TEXT)")
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO raw (v) VALUES (?)", (f"row-{i}",))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def _queue_send(env: _Env, n: int, payload: bytes) -> float:
    """Queue layer only: one message sent per transaction."""
    from agentq.backends import open_backend
    from agentq.spec import QueueSpec

    backend = open_backend(env.url)
    backend.create_queue(QueueSpec.simple("raw_q"))
    start = time.perf_counter()

    def send_one(tx: Any, i: int) -> None:
        tx.send("raw_q", f"m{i}", payload)

    for i in range(n):
        backend.transact(functools.partial(send_one, i=i))
    elapsed = time.perf_counter() - start
    backend.close()
    return n / elapsed


def _queue_receive_ack(env: _Env, n: int, batch: int, payload: bytes) -> float:
    """Queue layer only: lease a batch, then ack the whole batch in one transaction."""
    from agentq.backends import open_backend
    from agentq.spec import QueueSpec

    backend = open_backend(env.url)
    backend.create_queue(QueueSpec.simple("raw_q"))

    def send_many(tx: Any, first: int) -> None:
        for i in range(first, min(first + 1000, n)):
            tx.send("raw_q", f"m{i}", payload)

    def ack_all(tx: Any, messages: list[Any]) -> None:
        for m in messages:
            tx.ack("raw_q", m.key)

    for chunk in range(0, n, 1000):
        backend.transact(functools.partial(send_many, first=chunk))
    done = 0
    start = time.perf_counter()
    while done < n:
        for messages in backend.stream("raw_q", max_batch_size=batch, max_duration=0):
            backend.transact(functools.partial(ack_all, messages=messages))
            done += len(messages)
    elapsed = time.perf_counter() - start
    backend.close()
    return n / elapsed


def _in_threads(callers: int, n: int, one: Callable[[int], object]) -> float:
    """Calls ``one(i)`` for ``i`` in ``range(n)`` from ``callers`` threads; calls/s."""
    per = max(1, n // callers)
    failures: list[BaseException] = []

    def caller(c: int) -> None:
        try:
            for i in range(c * per, (c + 1) * per):
                one(i)
        except BaseException as exc:  # reported below, not swallowed with the thread
            failures.append(exc)

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(callers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.25)  # timed: Ctrl-C still reaches the main thread
    elapsed = time.perf_counter() - start
    if failures:
        raise failures[0]
    return per * callers / elapsed


def _decisions(env: _Env, n: int, pad: str, callers: int = 1) -> float:
    """Transactions that each write one application row and enqueue one task, from
    ``callers`` threads (several agents deciding at once share commits)."""
    rt = env.runtime()
    rt.transact(lambda tx: tx.execute("CREATE TABLE app (id INTEGER PRIMARY KEY, v TEXT)"))

    def decide(i: int) -> Callable[[Any], Any]:
        def fn(tx: Any) -> Any:
            tx.execute("INSERT INTO app (v) VALUES (?)", (f"decision-{i}",))
            return tx.enqueue("noop", {"n": i, "pad": pad})

        return fn

    rate = _in_threads(callers, n, lambda i: rt.transact(decide(i)))
    rows = rt.transact(lambda tx: tx.execute("SELECT COUNT(*) FROM app"))[0][0]
    rt.close()
    if rows != max(1, n // callers) * callers:
        raise RuntimeError(f"bench decisions: {rows} rows committed")
    return rate


def _enqueue_actions(env: _Env, n: int, pad: str, callers: int = 1) -> float:
    rt = env.runtime()
    rate = _in_threads(
        callers,
        n,
        lambda i: rt.enqueue_action("noop", {"n": i, "pad": pad}, idempotency_key=f"call-{i}"),
    )
    rt.close()
    return rate


def _spawn_workers(
    env: _Env, count: int, concurrency: int, batch: int
) -> list[subprocess.Popen[str]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, env.url, str(env.tools), str(concurrency), str(batch)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "ready":
            err = p.stderr.read() if p.stderr else ""
            raise RuntimeError(f"bench worker failed to start: {line} {err[-2000:]}")
    return procs


def _stop_workers(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()


def _end_to_end(env: _Env, n: int, workers: int, concurrency: int, batch: int, pad: str) -> float:
    rt = env.runtime()
    procs = _spawn_workers(env, workers, concurrency, batch)
    try:
        start = time.perf_counter()
        for chunk in range(0, n, 1000):
            rt.transact(
                lambda tx, c=chunk: [
                    tx.enqueue("noop", {"n": i, "pad": pad}) for i in range(c, min(c + 1000, n))
                ]
            )
        deadline = start + 600
        while rt.backend.stats("bench").depth > 0:
            if time.perf_counter() > deadline:
                raise RuntimeError("bench tasks did not finish in 10 minutes")
            time.sleep(0.002)
        elapsed = time.perf_counter() - start
    finally:
        _stop_workers(procs)
    done = sum(1 for t in rt.tasks("succeeded"))
    rt.close()
    if done != n:
        raise RuntimeError(f"only {done} of {n} bench tasks succeeded")
    return n / elapsed


def _latency(env: _Env, samples: int, in_process: bool) -> list[float]:
    rt = env.runtime()
    procs: list[subprocess.Popen[str]] = []
    worker = None
    if in_process:
        worker = rt.worker(concurrency=4, queues=["bench"]).start()
    else:
        procs = _spawn_workers(env, 1, 4, 4)
    try:
        time.sleep(0.3)  # let the worker settle into its idle wait
        gaps = []
        for i in range(samples):
            task = rt.enqueue_action("noop", {"n": i})
            committed = time.time()
            deadline = time.perf_counter() + 10
            while True:
                info = rt.task(task.task_id)
                if info.status == "succeeded":
                    break
                if time.perf_counter() > deadline:
                    raise RuntimeError("latency sample did not run in 10 s")
                time.sleep(0.001)
            gaps.append((info.result["started"] - committed) * 1000)
            time.sleep(0.02)  # idle again before the next sample
    finally:
        if worker is not None:
            worker.stop()
        _stop_workers(procs)
        rt.close()
    return gaps


def _idle_cpu(env: _Env, seconds: float = 5.0) -> float:
    procs = _spawn_workers(env, 1, 4, 4)
    try:
        time.sleep(0.5)
        pid = procs[0].pid
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        before, t0 = cpu(), time.perf_counter()
        time.sleep(seconds)
        return 100 * (cpu() - before) / (time.perf_counter() - t0)
    finally:
        _stop_workers(procs)


def run_bench(
    *,
    db: str | None = None,
    tasks: int = 2000,
    workers: int = 2,
    concurrency: int = 16,
    batch: int = 50,
    payload_bytes: int = 0,
    durability: str = "full",
    repeats: int = 3,
    latency_samples: int = 100,
    callers: int = 8,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every measurement ``repeats`` times and return medians with min and max.

    ``callers`` threads also run the decision and enqueue-action measures at once,
    as an agent framework serving many conversations would (their commits are
    shared: group commit); 1 skips those.
    """
    if db is not None and not db.startswith("sqlite:"):
        if db.startswith("spanner:"):
            from agentq.backends import open_backend

            open_backend(db).close()  # a clear error without credentials
            raise ConfigError(
                "agentq bench measures the embedded engine; a Spanner database is measured "
                "by its own metrics (this run would bill a real instance)"
            )
        raise ConfigError(f"agentq bench needs a sqlite:/// URL, not {db!r}")
    if durability not in ("full", "normal"):
        raise ConfigError("--durability must be full or normal")
    root = (
        Path(db[len("sqlite:///") :]).parent
        if db
        else Path(tempfile.mkdtemp(prefix="agentq-bench-"))
    )
    root.mkdir(parents=True, exist_ok=True)
    pad = "x" * payload_bytes
    results: dict[str, list[float]] = {}
    lat_same: list[float] = []
    lat_other: list[float] = []

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)
        progress(f"  {name}: {value:,.1f}")

    for r in range(repeats):
        progress(f"repeat {r + 1}/{repeats}")
        record(
            "raw_commits_per_s",
            _raw_commits(_Env(root, durability, "raw"), min(tasks, 2000), durability),
        )
        record(
            "queue_send_per_s",
            _queue_send(_Env(root, durability, "qs"), min(tasks, 2000), pad.encode()),
        )
        record(
            "queue_recv_ack_per_s",
            _queue_receive_ack(_Env(root, durability, "qr"), tasks, batch, pad.encode()),
        )
        n = min(tasks, 2000)
        record("decisions_per_s", _decisions(_Env(root, durability, "dec"), n, pad))
        record("enqueue_action_per_s", _enqueue_actions(_Env(root, durability, "act"), n, pad))
        if callers > 1:
            record(
                f"decisions_per_s_{callers}_callers",
                _decisions(_Env(root, durability, "decn"), 2 * n, pad, callers),
            )
            record(
                f"enqueue_action_per_s_{callers}_callers",
                _enqueue_actions(_Env(root, durability, "actn"), 2 * n, pad, callers),
            )
        for w in sorted({1, workers}):
            env = _Env(root, durability, f"e2e{w}")
            record(f"tasks_per_s_{w}w", _end_to_end(env, tasks, w, concurrency, batch, pad))
        lat_same += _latency(_Env(root, durability, "lat1"), latency_samples // repeats or 1, True)
        lat_other += _latency(
            _Env(root, durability, "lat2"), latency_samples // repeats or 1, False
        )
    progress("idle worker CPU")
    idle = _idle_cpu(_Env(root, durability, "idle"))
    out: dict[str, Any] = {
        "settings": {
            "tasks": tasks, "workers": workers, "concurrency": concurrency, "batch": batch,
            "callers": callers,
            "payload_bytes": payload_bytes, "durability": durability, "repeats": repeats,
            "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
        },
        "throughput": {name: _stats(vals) for name, vals in results.items()},
        "latency_ms": {
            "same_process": _lat(lat_same),
            "other_process": _lat(lat_other),
        },
        "idle_worker_cpu_percent": round(idle, 2),
    }  # fmt: skip
    raw = out["throughput"]["raw_commits_per_s"]["median"]
    out["fraction_of_raw"] = {
        name: round(v["median"] / raw, 3)
        for name, v in out["throughput"].items()
        if name != "raw_commits_per_s"
    }
    return out


def _lat(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50": round(_percentile(values, 0.5), 2),
        "p99": round(_percentile(values, 0.99), 2),
        "max": round(max(values), 2),
        "samples": len(values),
    }


def format_table(result: dict[str, Any]) -> str:
    """The result as a text table."""
    s = result["settings"]
    lines = [
        f"agentq bench: {s['tasks']} tasks, {s['workers']} workers x {s['concurrency']} handlers, "
        f"batch {s['batch']}, payload {s['payload_bytes']} B, synchronous={s['durability'].upper()}, "
        f"{s['repeats']} repeats, Python {s['python']}, SQLite {s['sqlite']}, {s['cpus']} CPUs",
        "",
        f"{'measure':<34}{'median':>12}{'min':>12}{'max':>12}{'x raw':>9}",
    ]
    for name, v in result["throughput"].items():
        frac = result["fraction_of_raw"].get(name)
        lines.append(
            f"{name:<34}{v['median']:>12,.0f}{v['min']:>12,.0f}{v['max']:>12,.0f}"
            f"{'' if frac is None else f'{frac:>9.2f}'}"
        )
    lines.append("")
    lines.append(f"{'enqueue -> handler start':<34}{'p50 ms':>12}{'p99 ms':>12}{'max ms':>12}")
    for where, v in result["latency_ms"].items():
        if v:
            lines.append(f"{where:<34}{v['p50']:>12.2f}{v['p99']:>12.2f}{v['max']:>12.2f}")
    lines.append("")
    lines.append(f"idle worker CPU: {result['idle_worker_cpu_percent']:.2f}%")
    return "\n".join(lines)
