"""Round trips and messages of one enqueue through the runtime on PostgreSQL (issue
38, item 2, the enqueue side), counted in libpq's trace of the backend's one
pooled connection (``pool_size=1``). Counts, never times.

An enqueue is one round trip, as pgqueuer's single-statement insert is, and its
statements (``BEGIN``, the message, the ledger record, the ``NOTIFY``,
``COMMIT``) go as one message: the server parses them together and answers once,
instead of five Parse/Bind/Execute exchanges that psycopg's pipeline mode feeds
one by one. An idempotency key costs no read of its own: the key is guessed
unused and checked in SQL with the commit (a retry that finds it used runs again,
reading it). Every guarantee is checked beside the count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from psycopg import pq  # noqa: E402

from agentq import Runtime, ToolContext, tool  # noqa: E402
from agentq.backends.postgres import PostgresBackend  # noqa: E402
from agentq.clock import FakeClock  # noqa: E402
from agentq.errors import IdempotencyConflict  # noqa: E402

# A message the client sends; the ones the server answers before the client goes on.
_SENT = re.compile(r"^F\t\d+\t(\w+)\b\t?(.*)$", re.DOTALL)
_WAITS = ("Sync", "Query")


class Args(BaseModel):
    n: int


@tool(queue="work")
def noop(ctx: ToolContext, args: Args) -> int:
    return args.n


class Text(BaseModel):
    text: str


@tool(queue="work")
def echo(ctx: ToolContext, args: Text) -> str:
    return args.text


class Traced:
    """The runtime (one pooled connection) and libpq's trace of that connection."""

    def __init__(self, rt: Runtime, trace: Path) -> None:
        assert isinstance(rt.backend, PostgresBackend)
        self.rt = rt
        self._trace = trace
        self._file = trace.open("w")
        with rt.backend._db._pool.connection() as conn:
            conn.pgconn.trace(self._file.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def sent(self, fn: Callable[[], Any]) -> list[tuple[str, str]]:
        """The messages the client sent while ``fn`` ran (kind, text), without the
        pool's liveness check of an idle connection (an empty query)."""
        self._file.flush()
        start = self._trace.stat().st_size
        fn()
        self._file.flush()
        with self._trace.open() as fh:
            fh.seek(start)
            lines: list[str] = []
            for line in fh.read().splitlines():
                if line.startswith(("F\t", "B\t")) or not lines:
                    lines.append(line)
                else:  # a statement's text goes on over lines
                    lines[-1] += "\n" + line
        found = [m.groups() for m in (_SENT.match(line) for line in lines) if m is not None]
        return [(kind, text) for kind, text in found if (kind, text) != ("Query", '""')]

    def close(self) -> None:
        self.rt.close()
        self._file.close()


def round_trips(sent: list[tuple[str, str]]) -> int:
    return sum(1 for kind, _ in sent if kind in _WAITS)


@pytest.fixture
def traced(postgres_url: str, tmp_path: Path) -> Iterator[Traced]:
    rt = Runtime(postgres_url + "?pool_size=1", tools=[noop, echo], clock=FakeClock())
    rt.transact(lambda tx: tx.enqueue("noop", {"n": 0}))  # the queue's spec read once
    t = Traced(rt, tmp_path / "libpq.trace")
    try:
        yield t
    finally:
        t.close()


def test_an_enqueue_is_one_round_trip_of_one_message(traced: Traced) -> None:
    rt, got = traced.rt, []
    sent = traced.sent(lambda: got.append(rt.transact(lambda tx: tx.enqueue("noop", {"n": 1}))))
    assert round_trips(sent) == 1, sent
    assert [kind for kind, _ in sent] == ["Query"], sent  # BEGIN ... COMMIT, one message
    text = sent[0][1].strip()
    assert text.startswith('"BEGIN ISOLATION LEVEL SERIALIZABLE;')
    # The wake-up goes with it: the notify statement, prepared by the fixture's
    # enqueue on this connection (pool_size=1), executed by name here.
    notify = rt.backend._notify_sql  # type: ignore[attr-defined]
    assert f"EXECUTE {notify.name}_" in text and "PREPARE" not in text, text
    assert text.rstrip('"').endswith("COMMIT")
    # The wake-up channel's secret name is read in SQL, never sent as a value:
    # pg_read_all_stats may read the statement in pg_stat_activity.
    channel = rt.backend._channel  # type: ignore[attr-defined]
    assert channel and channel not in text and channel.removeprefix("agentq_") not in text
    assert traced.rt.task(got[0].task_id).status == "queued"
    assert traced.rt.worker(concurrency=1).drain() == 2  # the fixture's task and this one


def test_an_idempotency_key_costs_no_read_of_its_own(traced: Traced) -> None:
    rt = traced.rt
    first: list[Any] = []
    sent = traced.sent(lambda: first.append(rt.submit("noop", {"n": 2}, idempotency_key="k")))
    assert round_trips(sent) == 1, sent
    assert [kind for kind, _ in sent] == ["Query"], sent  # the key's check in the one text
    assert first[0].created
    # Its retry finds the key (the guess fails once, then the key is read), the
    # same task, and a call with other arguments under it is refused.
    again = rt.submit("noop", {"n": 2}, idempotency_key="k")
    assert (again.task.task_id, again.created) == (first[0].task.task_id, False)
    with pytest.raises(IdempotencyConflict):
        rt.enqueue_action("noop", {"n": 3}, idempotency_key="k")
    assert len(rt.tasks()) == 2  # the fixture's and this key's


def test_a_decision_is_its_sql_then_the_commit(traced: Traced) -> None:
    rt = traced.rt
    rt.transact(lambda tx: tx.execute("CREATE TABLE app (v text)"))

    def decide(tx: Any) -> Any:
        tx.execute("INSERT INTO app (v) VALUES (%s)", ("x",))
        return tx.enqueue("noop", {"n": 4})

    sent = traced.sent(lambda: rt.transact(decide))
    assert round_trips(sent) == 2, sent
    notify = rt.backend._notify_sql  # type: ignore[attr-defined]  # prepared: EXECUTE'd
    assert sent[-1][0] == "Query" and f"EXECUTE {notify.name}_" in sent[-1][1], sent
    assert rt.transact(lambda tx: tx.execute("SELECT count(*) FROM app")) == [(1,)]


def test_values_bound_by_the_client_come_back_as_they_were(traced: Traced) -> None:
    rt = traced.rt
    # Quotes, backslashes, placeholders, statement ends and comments, non-ASCII:
    # each quoted by psycopg into the one text, none of it read as SQL.
    text = "it's \\x00 %s %(a)s $1 ?; COMMIT; -- /* é 😀 \\' \"\n"
    task = rt.enqueue_action("echo", {"text": text}, idempotency_key=text)
    assert rt.task(task.task_id).args == {"text": text}
    assert rt.enqueue_action("echo", {"text": text}, idempotency_key=text).task_id == task.task_id
    assert rt.worker(concurrency=1).drain() == 2
    assert rt.task(task.task_id).result == text


def test_each_kind_of_value_is_the_literal_of_itself(postgres_url: str) -> None:
    from agentq.backends.postgres.inline import inlined

    values: list[Any] = [
        None, True, False, 0, 7, -7, 2**63 - 1, -(2**63), 10**30, "", "a'b\\c", "é😀\n\t",
        b"", bytes(range(256)),
    ]  # fmt: skip
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for value in values:
            text = inlined(conn, [("SELECT 1 -%s, %s", (0, value))])
            assert text is not None and b"--" not in text.split(b",")[0], text
            assert conn.execute(text).fetchone() == (1, value), text
        # Not plain, or another placeholder: left to psycopg (None: bound by the server).
        assert inlined(conn, [("SELECT %s", (["a"],))]) is None
        assert inlined(conn, [("SELECT %(a)s", {"a": 1})]) is not None  # psycopg's own
