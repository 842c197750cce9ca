"""The floor and the queue layer: raw commits, and the backend alone.

``raw_commits_per_s`` is what the disk allows one committer at this durability
(SQLite), or one client of the PostgreSQL server (``raw_commits_per_s_<n>_callers``:
``n`` clients at once, whose commits the server flushes together);
``queue_send_per_s`` and ``queue_recv_ack_per_s`` are the Spanner-queue
operations with no runtime above them: one message sent per transaction, and
leasing a batch then acking it in one transaction (the most a worker could do
if running and recording a task cost nothing).
"""

from __future__ import annotations

import functools
import sqlite3
import time
from typing import Any

from agentq.bench.decisions import in_threads
from agentq.bench.env import BenchEnv

__all__ = ["queue_receive_ack", "queue_send", "raw_commits"]


def raw_commits(env: BenchEnv, n: int, durability: str, callers: int = 1) -> float:
    """Single-row commits per second: SQLite (WAL, the chosen synchronous; one
    caller), or PostgreSQL (the server's own durability; ``callers`` clients)."""
    if env.server is not None:
        return _raw_postgres_commits(env, n, callers)
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


def _raw_postgres_commits(env: BenchEnv, n: int, callers: int) -> float:
    """``INSERT`` one row, ``COMMIT``, from ``callers`` threads, each on its own
    connection opened before the clock starts (psycopg prepares the repeated
    statement after a few runs, as it does for agentq's)."""
    import psycopg

    with psycopg.connect(env.libpq_url, autocommit=True) as setup:
        setup.execute(f"CREATE TABLE raw ({env.id_column}, v text)")
    conns = [psycopg.connect(env.libpq_url) for _ in range(callers)]
    per = max(1, n // callers)  # in_threads gives caller c the indexes c*per ... (c+1)*per - 1

    def one(i: int) -> None:
        conn = conns[i // per]
        conn.execute("INSERT INTO raw (v) VALUES (%s)", (f"row-{i}",))
        conn.commit()

    try:
        return in_threads(callers, n, one)
    finally:
        for conn in conns:
            conn.close()


def queue_send(env: BenchEnv, n: int, payload: bytes) -> float:
    """Queue layer only: one message sent per transaction."""
    from agentq.backends import open_backend
    from agentq.spec import QueueSpec

    backend = open_backend(env.url)
    backend.create_queue(QueueSpec.simple("raw_q"))

    def send_one(tx: Any, i: int) -> None:
        tx.send("raw_q", f"m{i}", payload)

    start = time.perf_counter()
    for i in range(n):
        backend.transact(functools.partial(send_one, i=i))
    elapsed = time.perf_counter() - start
    backend.close()
    return n / elapsed


def queue_receive_ack(env: BenchEnv, n: int, batch: int, payload: bytes) -> float:
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
