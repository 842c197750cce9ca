"""The write side: decisions, enqueues and enqueue-action calls, per second.

* ``decisions_per_s`` — transactions that each write one application row and
  enqueue one task;
* ``enqueue_per_s`` — transactions that each enqueue one task and nothing else
  (one enqueue per commit, Huey's unit);
* ``enqueue_action_per_s`` — the idempotent one-call API;

each from one caller, and (``_<n>_callers``) from ``n`` threads at once, whose
transactions share commits (group commit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from agentq.bench.env import BenchEnv

__all__ = ["decisions", "enqueue_actions", "enqueues", "in_threads"]


def in_threads(callers: int, n: int, one: Callable[[int], object]) -> float:
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


def decisions(env: BenchEnv, n: int, pad: str, callers: int = 1) -> float:
    """Transactions that each write one application row and enqueue one task, from
    ``callers`` threads (several agents deciding at once share commits)."""
    rt = env.runtime()
    rt.transact(lambda tx: tx.execute(f"CREATE TABLE app ({env.id_column}, v TEXT)"))
    insert = f"INSERT INTO app (v) VALUES ({env.placeholder})"

    def decide(i: int) -> Callable[[Any], Any]:
        def fn(tx: Any) -> Any:
            tx.execute(insert, (f"decision-{i}",))
            return tx.enqueue("noop", {"n": i, "pad": pad})

        return fn

    rate = in_threads(callers, n, lambda i: rt.transact(decide(i)))
    rows = rt.transact(lambda tx: tx.execute("SELECT COUNT(*) FROM app"))[0][0]
    rt.close()
    if rows != max(1, n // callers) * callers:
        raise RuntimeError(f"bench decisions: {rows} rows committed")
    return float(rate)


def enqueues(env: BenchEnv, n: int, pad: str) -> float:
    """One enqueue per transaction, nothing else in it, one caller."""
    rt = env.runtime()
    rate = in_threads(
        1, n, lambda i: rt.transact(lambda tx: tx.enqueue("noop", {"n": i, "pad": pad}))
    )
    rt.close()
    return rate


def enqueue_actions(env: BenchEnv, n: int, pad: str, callers: int = 1) -> float:
    """``runtime.enqueue_action`` calls (each with its idempotency key) per second."""
    rt = env.runtime()
    rate = in_threads(
        callers,
        n,
        lambda i: rt.enqueue_action("noop", {"n": i, "pad": pad}, idempotency_key=f"call-{i}"),
    )
    rt.close()
    return rate
