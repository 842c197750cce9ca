"""The gRPC mock server google-cloud-spanner ships, extended for queue tests.

Extensions (after ``../shared/spanner-notes/test_recipe.py``): rules keyed by a
regex on the SQL text (canned results, streaming generators, errors), commit
timestamps, and a tiny bit of state: the ``agentq_records`` table is kept from
committed mutations and answered for agentq's record queries, so the runtime
can run over this mock. The mock still knows nothing about queues: every
RECEIVE / RENEWLEASE answer is scripted by the test.
"""

from __future__ import annotations

import base64
import collections
import datetime
import re
import threading
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import google.cloud.spanner_v1.testing.spanner_database_admin_pb2_grpc as admin_grpc
import google.cloud.spanner_v1.testing.spanner_pb2_grpc as spanner_grpc
import grpc
from google.cloud.spanner_v1 import (
    CommitRequest,
    PartialResultSet,
    ResultSet,
    ResultSetMetadata,
    ResultSetStats,
    TypeCode,
)
from google.cloud.spanner_v1.testing.mock_database_admin import DatabaseAdminServicer
from google.cloud.spanner_v1.testing.mock_spanner import SpannerServicer
from google.cloud.spanner_v1.types import type as type_pb
from google.protobuf.duration_pb2 import Duration
from google.protobuf.struct_pb2 import Value
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo


def row_type(columns: Iterable[tuple[str, Any]]) -> ResultSetMetadata:
    fields = [
        type_pb.StructType.Field(dict(name=n, type=type_pb.Type(dict(code=c)))) for n, c in columns
    ]
    return ResultSetMetadata(dict(row_type=type_pb.StructType(dict(fields=fields))))


def sv(s: str) -> Value:
    return Value(string_value=s)


NULL = Value(null_value=0)


def partial(values: Iterable[Value], *, metadata: ResultSetMetadata | None = None,
            resume_token: bytes = b"", last: bool = False) -> PartialResultSet:  # fmt: skip
    prs = PartialResultSet(resume_token=resume_token, last=last)
    if metadata is not None:
        prs.metadata = metadata
    # Append raw Values so proto-plus does not re-marshal them.
    PartialResultSet.pb(prs).values.extend(values)
    return prs


def update_count(n: int) -> ResultSet:
    return ResultSet(stats=ResultSetStats(row_count_exact=n))


class _GrpcStatus(
    collections.namedtuple("_GrpcStatus", ("code", "details", "trailing_metadata")), grpc.Status
):
    pass


def rpc_status(
    code: grpc.StatusCode,
    message: str,
    retry_delay_s: float | None = None,
    details: Iterable[Any] = (),
) -> Any:
    """A status to abort with; ``details`` (``google.rpc`` messages, e.g.
    ``ResourceInfo``) travel packed in ``grpc-status-details-bin``."""
    st = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        st.details.add().Pack(detail)
    md = [("grpc-status-details-bin", st.SerializeToString())]
    if retry_delay_s is not None:
        secs = int(retry_delay_s)
        delay = Duration(seconds=secs, nanos=int((retry_delay_s - secs) * 1e9) or 1)
        md.append(("google.rpc.retryinfo-bin", RetryInfo(retry_delay=delay).SerializeToString()))
    return _GrpcStatus(code, message, tuple(md))


def _clone(msg: Any) -> Any:
    return type(msg).deserialize(type(msg).serialize(msg))


@dataclass
class SqlRule:
    pattern: re.Pattern[str]
    result: ResultSet | None = None
    partials: list[PartialResultSet] | None = None
    stream: Callable[[Any, Any], Iterable[PartialResultSet]] | None = None
    error: Any = None
    times: int | None = None
    hits: int = 0


_RECORD_GET = re.compile(r"^SELECT v FROM agentq_records WHERE", re.I)
#: A short receive's read of the due keys: refused (as for a role without SELECT on
#: the queue, so the RECEIVE is sent as is) unless a rule answers it.
_DUE_CHECK = re.compile(r"^SELECT [\w, ]+ FROM \w+ WHERE .* ORDER BY \w+ LIMIT \d+$", re.I | re.S)
_RECORD_SCAN = re.compile(r"^SELECT k, v FROM agentq_records WHERE", re.I)
_RECORD_MULTI = re.compile(r"^SELECT k, v FROM agentq_records WHERE .*(IN UNNEST|= ANY)", re.I)


class QueueAwareSpannerServicer(SpannerServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.rules: list[SqlRule] = []
        self.records: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def on_sql(self, pattern: str, **kw: Any) -> SqlRule:
        rule = SqlRule(pattern=re.compile(pattern, re.I | re.S), **kw)
        with self._lock:
            self.rules.insert(0, rule)
        return rule

    def reset(self) -> None:
        with self._lock:
            self.rules.clear()
            self.records.clear()
        self.clear_requests()
        self.mock_spanner.clear_results()
        if hasattr(self.mock_spanner, "_errors_list"):
            self.mock_spanner._errors_list.clear()

    def of(self, cls: type) -> list[Any]:
        return [r for r in list(self.requests) if isinstance(r, cls)]

    def _match(self, sql: str) -> SqlRule | None:
        with self._lock:
            for rule in self.rules:
                if rule.pattern.search(sql):
                    rule.hits += 1
                    return rule
        return None

    def _maybe_begin(self, request: Any) -> Any:
        return self._SpannerServicer__maybe_create_transaction(request)

    @staticmethod
    def _maybe_fail(rule: SqlRule, context: Any) -> None:
        if rule.error is not None and (rule.times is None or rule.hits <= rule.times):
            context.abort_with_status(rule.error)

    def _records_answer(self, request: Any) -> list[PartialResultSet] | None:
        params = dict(request.params) if request.params else {}
        values = [
            params.get("tbl", params.get("p1")),
            params.get("k", params.get("prefix", params.get("p2"))),
        ]
        md_v = row_type([("v", TypeCode.STRING)])
        if _RECORD_GET.match(request.sql):
            tbl, key = values[0], values[1]
            with self._lock:
                found = self.records.get((tbl, key))
            return [partial([] if found is None else [sv(found)], metadata=md_v, last=True)]
        if _RECORD_MULTI.match(request.sql):
            tbl = params.get("tbl", params.get("p1"))
            keys = list(params.get("keys", params.get("p2")) or [])
            with self._lock:
                rows = [(k, self.records[(tbl, k)]) for k in keys if (tbl, k) in self.records]
            flat = [x for k, v in rows for x in (sv(k), sv(v))]
            md = row_type([("k", TypeCode.STRING), ("v", TypeCode.STRING)])
            return [partial(flat, metadata=md, last=True)]
        if _RECORD_SCAN.match(request.sql):
            tbl, prefix = values[0], values[1]
            with self._lock:
                rows = sorted(
                    (k, v) for (t, k), v in self.records.items() if t == tbl and k >= prefix
                )
            flat = [x for k, v in rows for x in (sv(k), sv(v))]
            md = row_type([("k", TypeCode.STRING), ("v", TypeCode.STRING)])
            return [partial(flat, metadata=md, last=True)]
        return None

    def ExecuteSql(self, request: Any, context: Any) -> Any:
        rule = self._match(request.sql)
        if rule is None:
            return super().ExecuteSql(request, context)
        self._requests.append(request)
        self._maybe_fail(rule, context)
        started = self._maybe_begin(request)
        result = _clone(rule.result if rule.result is not None else ResultSet())
        if started:
            result.metadata.transaction = started
        return result

    def ExecuteStreamingSql(self, request: Any, context: Any) -> Any:
        records = self._records_answer(request)
        rule = None if records is not None else self._match(request.sql)
        if rule is None and records is None and _DUE_CHECK.match(request.sql):
            self._requests.append(request)
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "no SELECT on the queue (mock)")
        if records is None and rule is None:
            yield from super().ExecuteStreamingSql(request, context)
            return
        self._requests.append(request)
        if rule is not None:
            self._maybe_fail(rule, context)
        started = self._maybe_begin(request)
        if records is not None:
            items: Iterable[PartialResultSet] = records
        elif rule is not None and rule.stream is not None:
            items = rule.stream(request, context)
        else:
            items = [_clone(p) for p in ((rule.partials if rule else None) or [PartialResultSet()])]
        first = True
        for item in items:
            if first and started:
                item.metadata.transaction = started
            first = False
            yield item

    def Commit(self, request: Any, context: Any) -> Any:
        resp = super().Commit(request, context)
        resp.commit_timestamp = datetime.datetime.now(datetime.UTC)  # as a real server stamps it
        self._apply_record_mutations(request)
        return resp

    def _apply_record_mutations(self, request: CommitRequest) -> None:
        for m in CommitRequest.pb(request).mutations:
            kind = m.WhichOneof("operation")
            if kind == "insert_or_update" and m.insert_or_update.table == "agentq_records":
                for row in m.insert_or_update.values:
                    tbl, key, value = (v.string_value for v in row.values)
                    with self._lock:
                        self.records[(tbl, key)] = value
            elif kind == "delete" and m.delete.table == "agentq_records":
                for key in m.delete.key_set.keys:
                    tbl, k = (v.string_value for v in key.values)
                    with self._lock:
                        self.records.pop((tbl, k), None)


class QueueAwareAdminServicer(DatabaseAdminServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.ddl: list[str] = []

    def UpdateDatabaseDdl(self, request: Any, context: Any) -> Any:
        self.ddl.extend(request.statements)
        return super().UpdateDatabaseDdl(request, context)


def start_server() -> tuple[QueueAwareSpannerServicer, QueueAwareAdminServicer, Any, int]:
    svc, adm = QueueAwareSpannerServicer(), QueueAwareAdminServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    spanner_grpc.add_SpannerServicer_to_server(svc, server)
    admin_grpc.add_DatabaseAdminServicer_to_server(adm, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return svc, adm, server, port


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
