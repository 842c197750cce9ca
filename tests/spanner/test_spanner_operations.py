"""Operating the Spanner backend: roles, deadlines, inspect, renewals, cancelling
receives (issue 10, defects 6-9)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.cloud.spanner_v1 import CreateSessionRequest, ExecuteSqlRequest, TypeCode

from agentq import (
    BackendUnavailable,
    ConfigError,
    FakeClock,
    KeyColumn,
    KeyType,
    QueueSpec,
    open_backend,
)
from agentq.backends.spanner import SpannerBackend
from agentq.backends.spanner.catalog import spec_text

from .conftest import spanner_url
from .mock_server import partial, row_type, rpc_status, sv
from .test_spanner_backend import receive_md, row

Q = QueueSpec("UserTasks", (KeyColumn("UserId", KeyType.INT), KeyColumn("MessageId", KeyType.STR)))


# -- fine-grained access control (defect 7) ---------------------------------------------------


def test_database_role_in_the_url_creates_sessions_with_that_role(
    mock_server: Any, svc: Any
) -> None:
    b = open_backend(spanner_url(mock_server[2]) + "&database_role=agentq_worker")
    try:
        b.create_queue(Q)
        b.transact(lambda tx: tx.send("UserTasks", (1, "m"), b"x"))
        assert "database_role=agentq_worker" in b.url
    finally:
        b.close()
    roles = {r.session.creator_role for r in svc.of(CreateSessionRequest)}
    assert roles == {"agentq_worker"}


def test_database_role_must_be_a_role_name() -> None:
    with pytest.raises(ConfigError, match="database_role"):
        open_backend("spanner://projects/p/instances/i/databases/d?database_role=x;DROP")


# -- deadlines and unreachable endpoints (defect 9) -------------------------------------------


def test_an_unreachable_endpoint_fails_at_open_naming_it(closed_port: int) -> None:
    port = closed_port  # nothing listens there
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match=f"127.0.0.1:{port}"):
        open_backend(
            f"spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:{port}&timeout=2"
        )
    assert time.monotonic() - start < 30  # generous: the bound is the 2 s timeout


def test_calls_have_deadlines_when_the_server_goes_away(mock_server: Any, svc: Any) -> None:
    """UNAVAILABLE is retried only within the per-call timeout, then BackendUnavailable."""
    b = open_backend(spanner_url(mock_server[2]) + "&timeout=1")
    try:
        b.create_queue(Q)
        svc.on_sql(r"^SELECT COUNT", error=rpc_status(grpc.StatusCode.UNAVAILABLE, "gone"))
        start = time.monotonic()
        with pytest.raises(BackendUnavailable, match=r"127\.0\.0\.1"):
            b.stats("UserTasks")
        assert time.monotonic() - start < 30
    finally:
        b.close()


def test_timeout_must_be_a_number_of_seconds() -> None:
    with pytest.raises(ConfigError, match="timeout"):
        open_backend("spanner://projects/p/instances/i/databases/d?timeout=soon")


# -- inspect reads the queues from the database (defect 6) ------------------------------------


def test_queues_initialised_elsewhere_are_listed_and_inspectable(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    backend.apply_ddl()  # agentq init records the queues it created
    assert ("agentq_queues", "UserTasks") in svc.records
    other = open_backend(backend.url.split("?")[0] + _query(backend), clock=FakeClock())
    try:
        assert isinstance(other, SpannerBackend)
        assert other.queues() == ["UserTasks"]  # never declared in this process
        assert other.queue_spec("UserTasks") == Q
    finally:
        other.close()


def _query(backend: SpannerBackend) -> str:
    endpoint = backend.endpoint
    dialect = "postgresql" if backend.dialect.postgres else "googlesql"
    return f"?dialect={dialect}&endpoint={endpoint}"


def test_oldest_age_counts_ready_messages_only_and_is_never_negative(
    backend: SpannerBackend, svc: Any
) -> None:
    svc.records[("agentq_queues", "UserTasks")] = spec_text(Q)
    md = row_type([("c", TypeCode.INT64), ("r", TypeCode.INT64), ("s", TypeCode.INT64),
                   ("o", TypeCode.TIMESTAMP)])  # fmt: skip
    future = (backend.clock.now() + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    rule = svc.on_sql(r"^SELECT COUNT\(\*\)", partials=[
        partial([sv("2"), sv("0"), sv("2"), sv(future)], metadata=md, last=True)])  # fmt: skip
    stats = backend.stats("UserTasks")  # a queue known from the database only
    assert rule.hits == 1
    assert stats.scheduled == 2 and stats.oldest_unacked_age == 0.0
    (req,) = [r for r in svc.of(ExecuteSqlRequest) if r.sql.startswith("SELECT COUNT")]
    deliver = "deliver_time" if backend.dialect.postgres else "DeliverTime"
    assert f"MIN(CASE WHEN {deliver} <= " in req.sql  # the oldest *ready* message


# -- renewals (defect 8) -------------------------------------------------------------------


def test_renew_is_not_resent_after_a_dropped_connection(backend: SpannerBackend, svc: Any) -> None:
    """The client's resumer re-sent RENEWLEASE after a dropped stream; the second call
    (old tokens already replaced) answered no rows and the leases were marked lost."""
    backend.create_queue(Q)
    md = row_type([("o", TypeCode.STRING), ("n", TypeCode.STRING), ("e", TypeCode.TIMESTAMP)])
    calls = []

    def stream(request: Any, context: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
        yield partial([sv("tok-1"), sv("tok-1b"), sv("2026-05-01T12:00:20Z")], metadata=md,
                      last=True)  # fmt: skip

    svc.on_sql(r"RENEWLEASE_UserTasks|renewlease_usertasks", stream=stream)
    with pytest.raises(BackendUnavailable):
        backend.renew("UserTasks", ["tok-1"])
    assert len(calls) == 1  # sent once; the worker decides what to do next


# -- receive streams end promptly when cancelled (defect 9, receive loop) ---------------------


def test_cancel_from_another_thread_ends_a_long_receive(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    server_cancelled = threading.Event()

    def stream(request: Any, context: Any) -> Any:
        context.add_callback(server_cancelled.set)
        yield partial(row(1, "a", b"x", "t", True), metadata=receive_md(backend.dialect.postgres))
        while context.is_active():
            time.sleep(0.01)

    svc.on_sql(r"RECEIVE_UserTasks|receive_usertasks", stream=stream)
    it = backend.stream("UserTasks", max_batch_size=1, max_duration=1200)
    assert next(it)[0].key == (1, "a")
    done = threading.Event()
    rest: list[Any] = []

    def read() -> None:
        rest.extend(it)
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.2)  # let the reader block on the open call (not a timing assertion)
    it.cancel()
    assert done.wait(10) and rest == []
    assert server_cancelled.wait(10)
    (req,) = [r for r in svc.of(ExecuteSqlRequest) if "eceive_" in r.sql.lower()]
    assert "'20m'" in req.sql
