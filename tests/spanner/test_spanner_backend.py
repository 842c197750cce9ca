"""The Spanner backend over real gRPC against google-cloud-spanner's mock server.

These tests assert what the client sends (SQL, mutations, parameters), how rows
are parsed, what is retried and how errors are mapped, in both dialects. What
only a real instance can show (queue semantics themselves) is listed in the
README and marked in the conformance suite.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.cloud.spanner_v1 import CommitRequest, ExecuteSqlRequest, RollbackRequest, TypeCode

from agentq import (
    ConfigError,
    DuplicateKey,
    KeyColumn,
    KeyType,
    MessageNotFound,
    PayloadType,
    QueueSpec,
    open_backend,
)
from agentq.backends.spanner import SpannerBackend, ddl

from .conftest import spanner_url
from .mock_server import NULL, partial, row_type, rpc_status, sv

Q = QueueSpec("UserTasks", (KeyColumn("UserId", KeyType.INT), KeyColumn("MessageId", KeyType.STR)))
J = QueueSpec.simple("Jobs", payload=PayloadType.JSON)


def receive_md(postgres: bool, payload_code: Any = TypeCode.BYTES) -> Any:
    names = (
        ["userid", "messageid", "payload", "deliver_time", "spanner_lease_expiration_timestamp",
         "spanner_lease_token", "spanner_last_batch_message"]
        if postgres else
        ["UserId", "MessageId", "Payload", "DeliverTime", "SpannerLeaseExpirationTimestamp",
         "SpannerLeaseToken", "SpannerLastBatchMessage"]
    )  # fmt: skip
    codes = [TypeCode.INT64, TypeCode.STRING, payload_code, TypeCode.TIMESTAMP,
             TypeCode.TIMESTAMP, TypeCode.STRING, TypeCode.BOOL]  # fmt: skip
    return row_type(list(zip(names, codes, strict=True)))


def row(uid: int, mid: str, payload: bytes, token: str, last: bool) -> list[Any]:
    return [sv(str(uid)), sv(mid), sv(base64.b64encode(payload).decode()),
            sv("2026-05-01T12:00:00.5Z"), sv("2026-05-01T12:00:10Z"), sv(token),
            __import__("google.protobuf.struct_pb2", fromlist=["Value"]).Value(bool_value=last)]  # fmt: skip


def commits(svc: Any) -> list[Any]:
    return svc.of(CommitRequest)


# -- DDL -------------------------------------------------------------------------------------


def test_ddl_googlesql() -> None:
    parent = QueueSpec(
        "OrderTasks", (KeyColumn("OrderId", KeyType.INT), KeyColumn("TaskId", KeyType.STR)),
        parent="Orders", ttl=timedelta(days=7),
    )  # fmt: skip
    stmts = ddl([parent, J])
    assert stmts[0].startswith("CREATE TABLE IF NOT EXISTS agentq_records (tbl STRING(128)")
    assert "rare_status STRING(MAX), owner STRING(MAX), tool STRING(MAX)) PRIMARY KEY (tbl, k)" in (
        stmts[0]
    )
    assert stmts[1:8] == [
        "ALTER TABLE agentq_records ADD COLUMN IF NOT EXISTS rare_status STRING(MAX)",
        "CREATE INDEX IF NOT EXISTS agentq_records_rare_status ON agentq_records "
        "(rare_status, tbl, k) WHERE rare_status IS NOT NULL",
        "ALTER TABLE agentq_records ADD COLUMN IF NOT EXISTS owner STRING(MAX)",
        "CREATE INDEX IF NOT EXISTS agentq_records_owner ON agentq_records "
        "(owner, tbl, k) WHERE owner IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS agentq_records_owner_rare ON agentq_records "
        "(owner, rare_status, tbl, k) WHERE owner IS NOT NULL AND rare_status IS NOT NULL",
        "ALTER TABLE agentq_records ADD COLUMN IF NOT EXISTS tool STRING(MAX)",
        "CREATE INDEX IF NOT EXISTS agentq_records_tool ON agentq_records "
        "(tool, tbl, k) WHERE tool IS NOT NULL",
    ]
    assert stmts[8] == (
        "CREATE QUEUE IF NOT EXISTS OrderTasks (OrderId INT64 NOT NULL, TaskId STRING(MAX) NOT NULL, "
        "Payload BYTES(MAX) NOT NULL) PRIMARY KEY (OrderId, TaskId), "
        "INTERLEAVE IN PARENT Orders ON DELETE CASCADE, "
        "ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY))"
    )
    assert stmts[9] == (
        "CREATE QUEUE IF NOT EXISTS Jobs (id STRING(MAX) NOT NULL, Payload JSON NOT NULL) "
        "PRIMARY KEY (id)"
    )


def test_ddl_postgresql() -> None:
    parent = QueueSpec(
        "OrderTasks", (KeyColumn("OrderId", KeyType.INT), KeyColumn("TaskId", KeyType.STR)),
        parent="Orders", ttl=timedelta(days=3),
    )  # fmt: skip
    stmts = ddl([parent], postgres=True)
    assert stmts[0].startswith("CREATE TABLE IF NOT EXISTS agentq_records (tbl varchar(128)")
    assert stmts[1] == "ALTER TABLE agentq_records ADD COLUMN IF NOT EXISTS rare_status varchar"
    assert stmts[3] == "ALTER TABLE agentq_records ADD COLUMN IF NOT EXISTS owner varchar"
    assert stmts[6] == "ALTER TABLE agentq_records ADD COLUMN IF NOT EXISTS tool varchar"
    assert stmts[8] == (
        "CREATE QUEUE IF NOT EXISTS ordertasks (orderid bigint NOT NULL, taskid varchar NOT NULL, "
        "payload bytea NOT NULL, PRIMARY KEY (orderid, taskid)) "
        "INTERLEAVE IN PARENT orders ON DELETE CASCADE TTL INTERVAL '3 days' ON deliver_time"
    )


def test_ttl_must_be_whole_days_on_spanner() -> None:
    with pytest.raises(ConfigError, match="whole days"):
        ddl([QueueSpec.simple("Q", ttl=timedelta(hours=5))])


def test_apply_ddl_sends_update_ddl(backend: SpannerBackend, mock_server: Any) -> None:
    backend.create_queue(Q)
    backend.apply_ddl()
    assert mock_server[1].ddl == backend.ddl()
    assert any("CREATE QUEUE IF NOT EXISTS" in s for s in mock_server[1].ddl)


# -- send / ack / transactions ----------------------------------------------------------------


def test_send_mutations_with_and_without_deliver_time(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    backend.create_queue(J)
    later = backend.clock.now() + timedelta(hours=72)

    def fn(tx: Any) -> None:
        tx.send("UserTasks", (42, "m-1"), b'{"raw":1}')
        tx.send("UserTasks", (42, "m-2"), b"\x00\xff", deliver_time=later)
        tx.send("Jobs", "j-1", {"tool": "x", "n": 1})

    backend.transact(fn)
    (commit,) = commits(svc)
    s1, s2, s3 = (m.send for m in commit.mutations)
    assert s1.queue == "UserTasks" and list(s1.key) == ["42", "m-1"]
    assert base64.b64decode(s1.payload) == b'{"raw":1}'  # BYTES go base64 on the wire
    assert not CommitRequest.pb(commit).mutations[0].send.HasField("deliver_time")
    assert base64.b64decode(s2.payload) == b"\x00\xff" and s2.deliver_time == later
    assert json.loads(s3.payload) == {"tool": "x", "n": 1}


def test_ack_mutations_strict_and_blind_ack_before_send(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)

    def heartbeat(tx: Any) -> None:
        tx.ack("UserTasks", (1, "hb"), must_exist=True)
        tx.ack("UserTasks", (1, "other"), must_exist=False)
        tx.send("UserTasks", (1, "hb"), b"next", deliver_time=tx.now + timedelta(seconds=30))

    backend.transact(heartbeat)
    (commit,) = commits(svc)
    kinds = [CommitRequest.pb(commit).mutations[i].WhichOneof("operation") for i in range(3)]
    assert kinds == ["ack", "ack", "send"]
    a1, a2 = commit.mutations[0].ack, commit.mutations[1].ack
    assert list(a1.key) == ["1", "hb"] and a1.ignore_not_found is False
    assert a2.ignore_not_found is True


def test_missing_message_on_strict_ack_is_message_not_found(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    svc.mock_spanner.add_error("Commit", rpc_status(grpc.StatusCode.NOT_FOUND, "Message not found"))
    calls = []
    with pytest.raises(MessageNotFound, match="already acknowledged"):
        backend.transact(lambda tx: (calls.append(1), tx.ack("UserTasks", (1, "gone"))))
    assert calls == [1]  # not retried


def test_duplicate_send_is_duplicate_key(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    svc.mock_spanner.add_error("Commit", rpc_status(grpc.StatusCode.ALREADY_EXISTS, "exists"))
    with pytest.raises(DuplicateKey):
        backend.transact(lambda tx: tx.send("UserTasks", (1, "dup"), b"x"))


def test_aborted_commit_reruns_the_whole_function(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    svc.mock_spanner.add_error(
        "Commit", rpc_status(grpc.StatusCode.ABORTED, "aborted", retry_delay_s=0.001)
    )
    runs = []

    def fn(tx: Any) -> str:
        runs.append(1)
        tx.send("UserTasks", (1, f"m{len(runs)}"), b"x")
        return "done"

    assert backend.transact(fn) == "done"
    assert len(runs) == 2
    assert [len(c.mutations) for c in commits(svc)] == [1, 1]


def test_exception_in_fn_rolls_back_and_commits_nothing(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    svc.on_sql(r"^UPDATE Orders", result=__import__(
        "tests.spanner.mock_server", fromlist=["update_count"]).update_count(1))  # fmt: skip

    def fn(tx: Any) -> None:
        tx.execute("UPDATE Orders SET State = 'x' WHERE Id = @id", {"id": 1})
        tx.send("UserTasks", (1, "m"), b"x")
        raise RuntimeError("agent crashed")

    with pytest.raises(RuntimeError):
        backend.transact(fn)
    assert commits(svc) == []
    assert len(svc.of(RollbackRequest)) == 1  # locks released, not left to time out


def test_application_sql_runs_in_the_same_transaction(backend: SpannerBackend, svc: Any) -> None:
    from .mock_server import update_count

    backend.create_queue(Q)
    svc.on_sql(r"^UPDATE Orders", result=update_count(1))
    postgres = backend.dialect.postgres
    sql = "UPDATE Orders SET State = $1 WHERE Id = $2" if postgres else (
        "UPDATE Orders SET State = @s WHERE Id = @id")  # fmt: skip
    params: Any = ["approved", 7] if postgres else {"s": "approved", "id": 7}
    backend.transact(lambda tx: (tx.execute(sql, params), tx.send("UserTasks", (7, "t"), b"x")))
    (dml,) = [r for r in svc.of(ExecuteSqlRequest) if r.sql.startswith("UPDATE")]
    (commit,) = commits(svc)
    assert commit.transaction_id  # the DML's transaction carries the send
    assert len(commit.mutations) == 1
    assert dict(dml.params) == (
        {"p1": "approved", "p2": "7"} if postgres else {"s": "approved", "id": "7"}
    )


def test_records_read_your_writes_inside_a_transaction(backend: SpannerBackend, svc: Any) -> None:
    svc.records[("tasks", "t1")] = json.dumps({"status": "queued"})

    def fn(tx: Any) -> tuple[Any, ...]:
        before = tx.get_record("tasks", "t1")
        tx.put_record("tasks", "t1", {"status": "running"})
        after = tx.get_record("tasks", "t1")
        deleted = tx.delete_record("tasks", "t1")
        return before, after, deleted, tx.get_record("tasks", "t1")

    before, after, deleted, gone = backend.transact(fn)
    assert before == {"status": "queued"} and after == {"status": "running"}
    assert deleted is True and gone is None
    assert ("tasks", "t1") not in svc.records  # the delete mutation committed
    # Reads go to the records table with the dialect's parameter style.
    reads = [r for r in svc.of(ExecuteSqlRequest)
             if "agentq_records" in r.sql and "SELECT rare_status" not in r.sql
             and "SELECT owner" not in r.sql and "SELECT tool" not in r.sql]  # fmt: skip
    expected = "$1" if backend.dialect.postgres else "@tbl"
    assert all(expected in r.sql for r in reads)


# -- receive ------------------------------------------------------------------------------------


def test_receive_sql_rows_and_batches(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    postgres = backend.dialect.postgres
    svc.on_sql(r"RECEIVE_UserTasks|receive_usertasks", partials=[
        partial(row(1, "a", b"p1", "tok-a", False), metadata=receive_md(postgres)),
        partial(row(1, "b", b"\x00\xff", "tok-b", True)),
        partial(row(2, "c", b"p3", "tok-c", True), last=True),
    ])  # fmt: skip
    batches = list(backend.stream("UserTasks", max_batch_size=3, max_duration=0))
    assert [[m.key for m in b] for b in batches] == [[(1, "a"), (1, "b")], [(2, "c")]]
    assert batches[0][1].payload == b"\x00\xff"
    assert [m.last_in_batch for m in batches[0]] == [False, True]
    assert batches[0][0].lease_token == "tok-a"
    assert batches[0][0].lease_expiry == datetime(2026, 5, 1, 12, 0, 10, tzinfo=UTC)
    assert batches[0][0].deliver_time == datetime(2026, 5, 1, 12, 0, 0, 500000, tzinfo=UTC)
    (req,) = [r for r in svc.of(ExecuteSqlRequest) if "receive_" in r.sql.lower()]
    if postgres:
        assert req.sql == (
            "SELECT userid, messageid, payload, deliver_time, spanner_lease_expiration_timestamp, "
            "spanner_lease_token, spanner_last_batch_message "
            "FROM spanner.receive_usertasks(3, NULL, '1m')"
        )
    else:
        assert req.sql == (
            "SELECT UserId, MessageId, Payload, DeliverTime, SpannerLeaseExpirationTimestamp, "
            "SpannerLeaseToken, SpannerLastBatchMessage "
            "FROM RECEIVE_UserTasks(max_duration=>'1m', max_batch_size=>3)"
        )
    assert req.transaction.single_use.read_only.strong is True


def test_rows_of_a_held_open_stream_arrive_before_it_ends(
    backend: SpannerBackend, svc: Any
) -> None:
    """No resume tokens on the stream: the client's buffering would hold the first batch
    back until the 20-minute RECEIVE ends. The backend reads the raw stream instead."""
    backend.create_queue(Q)
    got_first = threading.Event()
    server_saw: list[bool] = []
    cancelled = threading.Event()
    recorded = threading.Event()

    def stream(request: Any, context: Any) -> Any:
        context.add_callback(cancelled.set)
        yield partial(row(1, "a", b"x", "t", True), metadata=receive_md(backend.dialect.postgres))
        server_saw.append(got_first.wait(5))  # still open: the client must have the row
        recorded.set()
        while context.is_active():
            time.sleep(0.01)

    svc.on_sql(r"RECEIVE_UserTasks|receive_usertasks", stream=stream)
    it = backend.stream("UserTasks", max_batch_size=1, max_duration=600)
    first = next(it)
    got_first.set()
    assert first[0].key == (1, "a")
    assert recorded.wait(5)
    it.close()  # the worker stops reading: the RPC is cancelled
    assert cancelled.wait(5)
    assert server_saw == [True]


def test_unavailable_mid_stream_reissues_receive(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    backend.unavailable_backoff = 0.0
    md = receive_md(backend.dialect.postgres)
    calls = []

    def stream(request: Any, context: Any) -> Any:
        calls.append(request.sql)
        if len(calls) == 1:
            yield partial(row(1, "a", b"x", "t1", True), metadata=md)
            context.abort(grpc.StatusCode.UNAVAILABLE, "server restarted")
        else:
            yield partial(row(1, "b", b"y", "t2", True), metadata=md, last=True)

    svc.on_sql(r"RECEIVE_UserTasks|receive_usertasks", stream=stream)
    it = backend.stream("UserTasks", max_batch_size=5, max_duration=30)
    keys = [next(it)[0].key, next(it)[0].key]
    it.close()
    assert keys == [(1, "a"), (1, "b")]
    assert len(calls) == 2
    # Whole minutes, as the documents write them (the client ends it after 30 s).
    assert "'1m'" in calls[0] and "'1m'" in calls[1]


def test_renew_sql_params_and_rows(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    md = row_type([("SpannerOldLeaseToken", TypeCode.STRING), ("SpannerNewLeaseToken", TypeCode.STRING),
                   ("SpannerLeaseExpirationTimestamp", TypeCode.TIMESTAMP)])  # fmt: skip
    svc.on_sql(r"RENEWLEASE_UserTasks|renewlease_usertasks", partials=[partial(
        [sv("tok-1"), sv("tok-1b"), sv("2026-05-01T12:00:20Z"),
         sv("tok-2"), NULL, sv("2026-05-01T12:00:09Z")], metadata=md, last=True)])  # fmt: skip
    rows = backend.renew("UserTasks", ["tok-1", "tok-2", "garbage"])
    assert [(r.old_token, r.new_token) for r in rows] == [("tok-1", "tok-1b"), ("tok-2", None)]
    assert rows[0].lease_expiry == datetime(2026, 5, 1, 12, 0, 20, tzinfo=UTC)
    (req,) = [r for r in svc.of(ExecuteSqlRequest) if "enewlease" in r.sql.lower()]
    if backend.dialect.postgres:
        assert req.sql.endswith("FROM spanner.renewlease_usertasks($1)")
        assert list(req.params["p1"]) == ["tok-1", "tok-2", "garbage"]
    else:
        assert req.sql.endswith("FROM RENEWLEASE_UserTasks(lease_tokens => @tokens)")
        assert list(req.params["tokens"]) == ["tok-1", "tok-2", "garbage"]
        assert req.param_types["tokens"].array_element_type.code == TypeCode.STRING
    assert req.transaction.single_use.read_only.strong is True


# -- client setup ----------------------------------------------------------------------------------


def test_url_errors_are_clear() -> None:
    with pytest.raises(ConfigError, match="expected spanner://projects/P"):
        open_backend("spanner://my-db")
    with pytest.raises(ConfigError, match="dialect must be"):
        open_backend("spanner://projects/p/instances/i/databases/d?dialect=mysql")
    with pytest.raises(ConfigError, match="unknown Spanner URL option"):
        open_backend("spanner://projects/p/instances/i/databases/d?pool=3")


def test_missing_credentials_is_a_clear_error(tmp_path: Any) -> None:
    code = (
        "import os; os.environ.pop('SPANNER_EMULATOR_HOST', None)\n"
        "from agentq import open_backend\n"
        "open_backend('spanner://projects/p/instances/i/databases/d')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GCE_METADATA_HOST": "127.0.0.1:9",
           "GCE_METADATA_IP": "127.0.0.1:9", "NO_GCE_CHECK": "True"}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert proc.returncode != 0
    assert "BackendUnavailable: no Google Cloud credentials for Spanner" in proc.stderr


def test_builtin_metrics_do_not_take_over_the_meter_provider(mock_server: Any) -> None:
    code = (
        "from opentelemetry import metrics\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from agentq import open_backend\n"
        f"b = open_backend({spanner_url(mock_server[2])!r})\n"
        "metrics.set_meter_provider(MeterProvider())\n"
        "print(type(metrics.get_meter_provider()).__name__)\n"
        "b.close()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "MeterProvider", proc.stderr


def test_close_does_not_block(mock_server: Any, svc: Any) -> None:
    from google.cloud.spanner_v1.database_sessions_manager import DatabaseSessionsManager

    old = DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL
    DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = timedelta(minutes=10)
    try:
        b = open_backend(spanner_url(mock_server[2]))
        b.create_queue(Q)
        b.transact(lambda tx: tx.send("UserTasks", (1, "m"), b"x"))  # starts the maintenance thread
        start = time.monotonic()
        b.close()
        # The library's own close would wait up to the 10-minute polling interval.
        assert time.monotonic() - start < 5
    finally:
        DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = old
