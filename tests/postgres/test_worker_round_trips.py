"""Round trips per batch of the PostgreSQL worker (issue 38, item 2), counted in
libpq's trace of the backend's one pooled connection (``pool_size=1``): each
``Sync`` or simple ``Query`` the client sends waits for the server. Counts, never
times: on a busy machine a round trip costs about as much as a commit's flush.

A batch of N no-op tasks is leased, marked running, run and completed. The
target is what a bare-SQL worker with agentq's guarantees needs: the lease
(which reads the ready rows and their ledger records) and its commit, which
marks the tasks running, then one pipelined completion transaction that checks
its acks in SQL and writes the outcomes from the records as claimed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from psycopg import pq  # noqa: E402

from agentq import Runtime, ToolContext, tool  # noqa: E402
from agentq.backends.postgres import PostgresBackend, prepared  # noqa: E402
from agentq.clock import FakeClock  # noqa: E402

#: What a round trip of an idle lease (nothing ready) answers.
_NOTHING_READY = 'CommandComplete\t "SELECT 0"'


class Args(BaseModel):
    n: int


@tool(queue="work")
def noop(ctx: ToolContext, args: Args) -> int:
    return args.n


class Trace:
    """libpq's trace of the pool's one connection, cut into round trips: what the
    client sent, then what it read before it sent again."""

    def __init__(self, backend: PostgresBackend, path: Path) -> None:
        self._path = path
        self._file = path.open("w")
        with backend._db._pool.connection() as conn:
            conn.pgconn.trace(self._file.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def round_trips(self, fn: Callable[[], Any]) -> list[tuple[list[str], list[str]]]:
        self._file.flush()
        start = self._path.stat().st_size
        fn()
        self._file.flush()
        with self._path.open() as fh:
            fh.seek(start)
            lines = fh.read().splitlines()
        messages: list[str] = []
        for line in lines:  # a text of statements spans lines: one message
            if line.startswith(("F\t", "B\t")) or not messages:
                messages.append(line)
            else:
                messages[-1] += "\n" + line
        trips: list[tuple[list[str], list[str]]] = []
        for line in messages:
            side, _, message = line.partition("\t")
            message = message.partition("\t")[2]  # after the length
            if side == "F" and (not trips or trips[-1][1]):
                trips.append(([], []))
            if trips:
                trips[-1][0 if side == "F" else 1].append(message)
        # The pool's liveness check of an idle connection is not the worker's.
        return [t for t in trips if t[0] != ['Query\t ""']]

    def close(self) -> None:
        self._file.close()


def worked(trips: list[tuple[list[str], list[str]]]) -> list[str]:
    """The round trips that were not idle leases (a lease that found nothing, its
    look for the next visible time, and its COMMIT), each as the statements sent."""
    return [" | ".join(m.split("\t")[1][:70] for m in sent if m.startswith(("Parse", "Query")))
            for sent in worked_messages(trips)]  # fmt: skip


def _is_lease(message: str) -> bool:
    """Whether a message sent holds a lease's SELECT: its text, or the EXECUTE of
    the statement prepared from it (:mod:`agentq.backends.postgres.prepared`)."""
    leases = [name for text, name in prepared._names.items() if "SKIP LOCKED" in text]
    return "SKIP LOCKED" in message or any(f"EXECUTE {name}_" in message for name in leases)


def worked_messages(trips: list[tuple[list[str], list[str]]]) -> list[list[str]]:
    """:func:`worked`, each round trip as the messages the client sent."""
    out: list[list[str]] = []
    idle = False
    for sent, read in trips:
        if any(_is_lease(m) for m in sent) and _NOTHING_READY in read:
            idle = True
        if not idle:
            out.append(sent)
        elif any("COMMIT" in m for m in read):
            idle = False
    return out


@pytest.fixture
def traced(postgres_url: str, tmp_path: Path) -> Iterator[tuple[Runtime, Trace]]:
    rt = Runtime(postgres_url + "?pool_size=1", tools=[noop], clock=FakeClock())
    assert isinstance(rt.backend, PostgresBackend)
    trace = Trace(rt.backend, tmp_path / "libpq.trace")
    try:
        yield rt, trace
    finally:
        rt.close()
        trace.close()


def test_a_batch_of_no_op_tasks_costs_three_round_trips(traced: tuple[Runtime, Trace]) -> None:
    rt, trace = traced
    n = 8
    worker = rt.worker(concurrency=n, batch_size=n)
    worker.drain()  # the holds of its tools read once (then cached)
    for i in range(n):
        rt.enqueue_action("noop", {"n": i})
    done: list[int] = []
    trips = worked(trace.round_trips(lambda: done.append(worker.drain())))
    assert done == [n]
    assert all(rt.task(t.task_id).status == "succeeded" for t in rt.tasks())
    assert len(trips) <= 3, "\n".join(trips)


def test_each_round_trip_of_a_batch_is_one_message(traced: tuple[Runtime, Trace]) -> None:
    """The lease's read, its commit (the batch's lease update and claim, with
    arrays of the batch's values) and the completion each go as one text of
    statements, parsed and answered once by the server, not a Parse/Bind/Execute
    per statement fed by psycopg's pipeline."""
    rt, trace = traced
    n = 8
    worker = rt.worker(concurrency=n, batch_size=n)
    worker.drain()
    for i in range(n):
        rt.enqueue_action("noop", {"n": i})
    done: list[int] = []
    trips = worked_messages(trace.round_trips(lambda: done.append(worker.drain())))
    assert done == [n]
    assert all(rt.task(t.task_id).status == "succeeded" for t in rt.tasks())
    kinds = [[m.split("\t")[0] for m in sent] for sent in trips]
    assert kinds and all(k == ["Query"] for k in kinds), kinds
