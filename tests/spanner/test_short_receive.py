"""One-shot receives (``stream(..., max_duration=0)``: ``drain()``, the heartbeat
monitor) send only what the queue documents show (issue 29, defect 2).

The documents write a RECEIVE's duration in whole minutes (``'20m'``) and advise
against extremely short ones; none shows ``'0s'`` or promises what it leases. A
short receive is therefore a ``'1m'`` RECEIVE the client cancels once no row
came for the quiet interval, sent only when a message is due; ``receive_short=0s``
in the URL keeps the ``'0s'`` form for an instance where it is seen to work.
Against google-cloud-spanner's mock server: what the client sends and when it
ends the call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.cloud.spanner_v1 import ExecuteSqlRequest, TypeCode

from agentq import FakeClock, open_backend
from agentq.backends.spanner import SpannerBackend

from .conftest import spanner_url
from .mock_server import partial, row_type, rpc_status, sv
from .test_spanner_backend import Q, receive_md, row

RECEIVE = r"RECEIVE_UserTasks|receive_usertasks"
DUE = r"^SELECT userid, messageid FROM usertasks WHERE"


def _due(*keys: tuple[int, str]) -> list[Any]:
    """The due check's answer: these keys are due."""
    md = row_type([("UserId", TypeCode.INT64), ("MessageId", TypeCode.STRING)])
    return [partial([sv(str(v)) for key in keys for v in key], metadata=md, last=True)]


def _receives(svc: Any) -> list[str]:
    return [r.sql for r in svc.of(ExecuteSqlRequest) if "receive_" in r.sql.lower()]


def _held_open(rows: list[list[Any]], postgres: bool, cancelled: threading.Event) -> Any:
    """A RECEIVE that sends ``rows`` (one batch each) and then stays open until the
    client cancels it, as a real one does until its duration is up."""

    def stream(request: Any, context: Any) -> Iterator[Any]:
        context.add_callback(cancelled.set)
        for i, values in enumerate(rows):
            yield partial(values, metadata=receive_md(postgres) if i == 0 else None)
        cancelled.wait(60)

    return stream


@pytest.fixture
def short_backend(mock_server: Any, svc: Any, dialect: str) -> Iterator[SpannerBackend]:
    url = spanner_url(mock_server[2], dialect) + "&receive_short=cancel:0.2"
    b = open_backend(url, clock=FakeClock())
    assert isinstance(b, SpannerBackend)
    b.create_queue(Q)
    yield b
    b.close()


def test_a_short_receive_is_a_documented_receive_ended_once_the_due_messages_came(
    short_backend: SpannerBackend, svc: Any
) -> None:
    postgres = short_backend.dialect.postgres
    cancelled = threading.Event()
    rows = [row(1, "a", b"x", "tok-a", True), row(1, "b", b"y", "tok-b", True)]
    svc.on_sql(DUE, partials=_due((1, "a"), (1, "b")))
    svc.on_sql(RECEIVE, stream=_held_open(rows, postgres, cancelled))
    batches = list(short_backend.stream("UserTasks", max_batch_size=5, max_duration=0))
    assert [[m.key for m in b] for b in batches] == [[(1, "a")], [(1, "b")]]
    assert cancelled.wait(10)  # the client ended the call; the server did not
    (sql,) = _receives(svc)
    assert sql.endswith(
        "spanner.receive_usertasks(5, NULL, '1m')"
        if postgres
        else "RECEIVE_UserTasks(max_duration=>'1m', max_batch_size=>5)"
    )
    assert "'0s'" not in sql


def test_due_messages_leased_elsewhere_end_the_receive_after_the_quiet_interval(
    short_backend: SpannerBackend, svc: Any
) -> None:
    """(1, "c") is due but another worker holds it: after the quiet interval
    (0.2 s here) without a row, the client cancels the call."""
    cancelled = threading.Event()
    svc.on_sql(DUE, partials=_due((1, "a"), (1, "c")))
    rows = [row(1, "a", b"x", "tok-a", True)]
    svc.on_sql(RECEIVE, stream=_held_open(rows, short_backend.dialect.postgres, cancelled))
    batches = list(short_backend.stream("UserTasks", max_batch_size=5, max_duration=0))
    assert [[m.key for m in b] for b in batches] == [[(1, "a")]]
    assert cancelled.wait(10)


def test_messages_this_backend_holds_are_not_received_again_until_acked(
    short_backend: SpannerBackend, svc: Any
) -> None:
    """Its own leases are due to SQL (it cannot see leases); no RECEIVE waits for them."""
    postgres = short_backend.dialect.postgres
    svc.on_sql(DUE, partials=_due((1, "a")))
    cancelled = threading.Event()
    svc.on_sql(RECEIVE, stream=_held_open([row(1, "a", b"x", "tok-a", True)], postgres, cancelled))
    assert len(list(short_backend.stream("UserTasks", max_batch_size=5, max_duration=0))) == 1
    assert list(short_backend.stream("UserTasks", max_batch_size=5, max_duration=0)) == []
    assert len(_receives(svc)) == 1  # held here: no second RECEIVE
    short_backend.transact(lambda tx: tx.ack("UserTasks", (1, "a"), must_exist=False))
    cancelled2 = threading.Event()
    svc.on_sql(RECEIVE, stream=_held_open([row(1, "a", b"z", "tok-a2", True)], postgres, cancelled2))
    assert len(list(short_backend.stream("UserTasks", max_batch_size=5, max_duration=0))) == 1
    assert len(_receives(svc)) == 2  # acked: a message under that key is received again


def test_no_receive_is_sent_when_no_message_is_due(
    short_backend: SpannerBackend, svc: Any
) -> None:
    svc.on_sql(DUE, partials=_due())
    assert list(short_backend.stream("UserTasks", max_batch_size=5, max_duration=0)) == []
    assert _receives(svc) == []
    (check,) = [r for r in svc.of(ExecuteSqlRequest) if " LIMIT " in r.sql]
    assert check.transaction.single_use.read_only.strong  # a strong read, not a stale one


def test_a_role_that_may_not_read_the_queue_receives_without_the_check(
    short_backend: SpannerBackend, svc: Any
) -> None:
    """Fine-grained access control: receiving needs no SELECT on the queue."""
    postgres = short_backend.dialect.postgres
    svc.on_sql(DUE, error=rpc_status(grpc.StatusCode.PERMISSION_DENIED, "no SELECT on queue"))
    for _ in range(2):
        cancelled = threading.Event()
        rule = svc.on_sql(RECEIVE, stream=_held_open([], postgres, cancelled))
        assert list(short_backend.stream("UserTasks", max_batch_size=5, max_duration=0)) == []
        assert rule.hits == 1 and cancelled.wait(10)
    checks = [r for r in svc.of(ExecuteSqlRequest) if " LIMIT " in r.sql]
    assert len(checks) == 1  # refused once, not asked again


def test_receive_short_0s_sends_the_zero_duration_form(
    mock_server: Any, svc: Any, dialect: str
) -> None:
    b = open_backend(spanner_url(mock_server[2], dialect) + "&receive_short=0s", clock=FakeClock())
    try:
        b.create_queue(Q)
        svc.on_sql(RECEIVE, partials=[partial(row(1, "a", b"x", "t", True), last=True,
                                              metadata=receive_md(dialect == "postgresql"))])  # fmt: skip
        assert [[m.key for m in batch] for batch in b.stream("UserTasks", 1, 0)] == [[(1, "a")]]
        (sql,) = _receives(svc)
        assert "'0s'" in sql
        assert not [r for r in svc.of(ExecuteSqlRequest) if " LIMIT " in r.sql]
    finally:
        b.close()


def test_a_duration_of_part_of_a_minute_is_written_in_minutes_and_ended_by_the_client(
    short_backend: SpannerBackend, svc: Any
) -> None:
    clock = short_backend.clock
    assert isinstance(clock, FakeClock)
    cancelled = threading.Event()
    svc.on_sql(RECEIVE, stream=_held_open([], short_backend.dialect.postgres, cancelled))
    done = threading.Event()
    got: list[Any] = []

    def receive() -> None:
        got.extend(short_backend.stream("UserTasks", max_batch_size=1, max_duration=30))
        done.set()

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    while not _receives(svc):  # the call is open
        t.join(0.01)
    assert not done.wait(0.3)  # no quiet interval on a long receive: it waits
    clock.advance(30)  # its 30 s are up
    assert done.wait(10) and got == []
    assert cancelled.wait(10)
    assert all("'1m'" in sql for sql in _receives(svc))
