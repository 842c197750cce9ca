"""A stand-in for Spanner queues between google-cloud-spanner and the emulator.

**Delete this module when the Cloud Spanner emulator supports queues**
(GoogleCloudPlatform/cloud-spanner-emulator#383: emulator 1.5.28 rejects
``CREATE QUEUE``, does not know the Send/Ack mutations, RECEIVE or RENEWLEASE).

It is a gRPC server that forwards every call to the emulator byte for byte,
except what the emulator lacks, which it translates (from ``queues-using`` in
the Spanner docs, ``/work/shared/seeds/001``):

* ``CREATE QUEUE`` / ``DROP QUEUE`` (both dialects) become a backing table of
  the same name with the system column ``DeliverTime`` (``deliver_time``) and
  lease columns ``emu_lease_token``, ``emu_lease_expiry``, ``emu_visible_at``
  and ``emu_deliveries``.
* In ``Commit`` (and ``BeginTransaction``'s ``mutation_key``), Send becomes an
  insert (a duplicate key fails with ALREADY_EXISTS from the emulator) and Ack
  a delete; a strict ack (no ``ignore_not_found``) of a missing row fails the
  commit with NOT_FOUND, after the transaction read the row.
* ``RECEIVE_<q>`` (``spanner.receive_<q>``) becomes leasing transactions on
  the backing table, streamed as batches with the documented columns, until
  ``max_duration`` ends; ``RENEWLEASE_<q>`` (``spanner.renewlease_<q>``) a
  renewing transaction with the documented return rules.
* ABORTED from the emulator gets the RetryInfo trailer Spanner sends.

Only the documented statement shapes are translated: anything else goes to
the emulator, which rejects a wrong function name, column or argument.

Time (delivery, leases, backoff) runs on one clock per database, Spanner's own
(the system clock) unless a test registers a fake one. The lease length and the
shape of the redelivery backoff come from the documents (:mod:`.timekeeping`);
what they leave open (batch sizes, order, splits, the backoff's figures) is
drawn per database from the run's seed (:mod:`.choices`). ``README.md`` beside
this module lists every behaviour and its source. The stand-in imports nothing
from agentq (``test_standin_independence.py`` checks it).
"""

from __future__ import annotations

import collections
import re
import threading
from concurrent import futures
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.cloud import spanner_v1
from google.cloud.spanner_v1.types import type as type_pb
from google.protobuf.duration_pb2 import Duration
from google.protobuf.struct_pb2 import ListValue, Value
from google.rpc.error_details_pb2 import RetryInfo

from .emulator import database_path
from .leases import Leases
from .queue_sql import QueueDef, Rejected, parse_ts, queue_statement, translate_ddl, ts
from .timekeeping import LEASE_SECONDS, QueueClock

_SPANNER = "/google.spanner.v1.Spanner/"
_STREAMING = {_SPANNER + m for m in ("ExecuteStreamingSql", "StreamingRead", "BatchWrite")}
_DDL = "/google.spanner.admin.database.v1.DatabaseAdmin/UpdateDatabaseDdl"
_PB = {
    name: getattr(spanner_v1, name).pb()
    for name in (
        "CommitRequest",
        "CommitResponse",
        "BeginTransactionRequest",
        "Transaction",
        "ReadRequest",
        "ResultSet",
        "RollbackRequest",
        "ExecuteSqlRequest",
        "ExecuteBatchDmlRequest",
        "PartialResultSet",
    )
}
_Mutation = spanner_v1.Mutation.pb()
_Code = type_pb.TypeCode
_LEASE = timedelta(seconds=LEASE_SECONDS)
_TOKEN = "emu-lease-"
_UPDATE = re.compile(r"\s*UPDATE\s+(\w+)", re.I)


class Interposer:
    """The gRPC server; ``endpoint`` is what the client connects to."""

    def __init__(self, emulator_endpoint: str, client: Any) -> None:
        self._channel = grpc.insecure_channel(emulator_endpoint)
        self.leases = Leases(client)
        self._queues: dict[str, dict[str, QueueDef]] = {}
        self.calls: collections.Counter[str] = collections.Counter()  # unary RPCs by name
        #: Databases whose RECEIVEs may say '0s' (their URL has receive_short=0s).
        self._zero_allowed: set[str] = set()
        #: The max_duration of every RECEIVE the stand-in was sent, by database path.
        self.durations: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        #: RECEIVE calls open now, by (database path, queue name in lower case).
        self.receiving: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
        self._server.add_generic_rpc_handlers([_Handler(self)])
        self.endpoint = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None)
        self._channel.close()

    def use_clock(self, database_id: str, clock: QueueClock) -> None:
        """Run the queues of this database on ``clock`` (as if it were Spanner's)."""
        self.leases.clocks[database_path(database_id)] = clock

    def label(self, database_id: str, label: str) -> None:
        """Draw this database's choices (:mod:`.choices`) from ``label`` (its test)."""
        self.leases.labels[database_path(database_id)] = label

    def choices(self, database_id: str) -> Any:
        """This database's draw, for a failure message."""
        return self.leases.choices(database_path(database_id))

    def lease_expirations(self, database_id: str, queue: str) -> int:
        """The documented ``lease_expiration_count`` metric of a queue: deliveries
        whose lease ran out without an ack."""
        with self.leases._lock:
            return self.leases.expirations[(database_path(database_id), queue.lower())]

    def allow_zero_duration(self, database_id: str) -> None:
        """Take RECEIVEs of ``'0s'`` on this database (refused otherwise)."""
        with self._lock:
            self._zero_allowed.add(database_path(database_id))

    def zero_allowed(self, db: str) -> bool:
        with self._lock:
            return db in self._zero_allowed

    def receive_durations(self, database_id: str) -> list[str]:
        """The ``max_duration`` of each RECEIVE sent on this database, as written."""
        with self._lock:
            return list(self.durations[database_path(database_id)])

    def open_receives(self, database_id: str, queue: str) -> int:
        """How many RECEIVE calls on ``queue`` of this database are open now."""
        with self._lock:
            return self.receiving[(database_path(database_id), queue.lower())]

    def leased(self, database_id: str, queue: str) -> int:
        """How many messages of ``queue`` hold an unexpired lease now."""
        db = database_path(database_id)
        return self.leases.leased_count(db, self._queue(db, queue))

    def forget(self, database_id: str) -> None:
        """Drop what the interposer knows of a database that is gone."""
        db = database_path(database_id)
        with self._lock:
            self._queues.pop(db, None)
            self._zero_allowed.discard(db)
            self.durations.pop(db, None)
        self.leases.forget(db)

    def _queue(self, db: str, name: str, kind: str = "Queue") -> QueueDef:
        queue = self._queues.get(db, {}).get(name.lower())
        if queue is None:
            raise Rejected(grpc.StatusCode.NOT_FOUND, f"{kind} not found: {name}")
        return queue

    def refuse_update(self, request: Any) -> None:
        """Queues take no UPDATE (the examples' heartbeat pattern: "Spanner queues
        don't support UPDATE DML statements"); the code is not documented."""
        self.refuse_update_sql(request.session, request.sql)

    def refuse_update_sql(self, session: str, sql: str) -> None:
        match = _UPDATE.match(sql)
        if match is None:
            return
        db = session.split("/sessions/")[0]
        if match.group(1).lower() in self._queues.get(db, {}):
            raise Rejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"UPDATE is not supported on queue {match.group(1)}: acknowledge the message and "
                "send a new one",
            )

    # -- forwarding ---------------------------------------------------------------

    def call(self, method: str, request: bytes, context: Any) -> bytes:
        try:
            return self._channel.unary_unary(method)(  # type: ignore[no-any-return]
                request, metadata=_metadata(context), timeout=context.time_remaining()
            )
        except grpc.RpcError as exc:
            _relay(exc, context)
            raise  # unreachable: _relay aborts

    def pb_call(self, name: str, request: Any, response: str, context: Any) -> Any:
        raw = self.call(_SPANNER + name, request.SerializeToString(), context)
        return _PB[response].FromString(raw)

    def stream(self, method: str, request: bytes, context: Any) -> Any:
        call = self._channel.unary_stream(method)(
            request, metadata=_metadata(context), timeout=context.time_remaining()
        )
        context.add_callback(call.cancel)
        try:
            yield from call
        except grpc.RpcError as exc:
            if context.is_active():
                _relay(exc, context)

    # -- DDL and mutations ------------------------------------------------------------

    def update_ddl(self, request: bytes, context: Any) -> bytes:
        from google.cloud.spanner_admin_database_v1.types import UpdateDatabaseDdlRequest

        pb = UpdateDatabaseDdlRequest.pb().FromString(request)
        translated = [translate_ddl(s) for s in pb.statements]
        if all(q is None and s == o for (s, q), o in zip(translated, pb.statements, strict=True)):
            return self.call(_DDL, request, context)
        del pb.statements[:]
        pb.statements.extend(s for s, _ in translated)
        response = self.call(_DDL, pb.SerializeToString(), context)
        with self._lock:
            for queue in (q for _, q in translated if q is not None):
                self._queues.setdefault(pb.database, {}).setdefault(queue.name.lower(), queue)
        return response

    def _mutation(self, db: str, m: Any, now: datetime) -> tuple[Any, tuple[QueueDef, Any] | None]:
        kind = m.WhichOneof("operation")
        if kind == "send":
            q = self._queue(db, m.send.queue)
            when = (
                parse_ts(ts(m.send.deliver_time.ToDatetime(UTC)))
                if m.send.HasField("deliver_time")
                else now
            )
            row = ListValue(
                values=[*m.send.key.values, m.send.payload, Value(string_value=ts(max(when, now)))]
            )
            cols = [*q.keys, q.payload, q.deliver]
            return _Mutation(insert={"table": q.name, "columns": cols, "values": [row]}), None
        if kind == "ack":
            q = self._queue(db, m.ack.queue)
            delete = _Mutation(delete={"table": q.name, "key_set": {"keys": [m.ack.key]}})
            return delete, None if m.ack.ignore_not_found else (q, m.ack.key)
        return m, None

    def begin_transaction(self, request: bytes, context: Any) -> bytes:
        pb = _PB["BeginTransactionRequest"].FromString(request)
        if pb.HasField("mutation_key") and pb.mutation_key.WhichOneof("operation") in (
            "send",
            "ack",
        ):
            db = pb.session.split("/sessions/")[0]
            pb.mutation_key.CopyFrom(
                self._mutation(db, pb.mutation_key, self.leases.clock(db).now())[0]
            )
            request = pb.SerializeToString()
        return self.call(_SPANNER + "BeginTransaction", request, context)

    def commit(self, request: bytes, context: Any) -> bytes:
        pb = _PB["CommitRequest"].FromString(request)
        if not any(m.WhichOneof("operation") in ("send", "ack") for m in pb.mutations):
            return self.call(_SPANNER + "Commit", request, context)
        db = pb.session.split("/sessions/")[0]
        now = self.leases.clock(db).now()
        strict, sent, out = [], set(), []
        for m in pb.mutations:
            new, check = self._mutation(db, m, now)
            if m.WhichOneof("operation") == "send":
                sent.add((m.send.queue.lower(), m.send.key.SerializeToString()))
            if check and (check[0].name.lower(), check[1].SerializeToString()) not in sent:
                strict.append(check)
            out.append(new)
        del pb.mutations[:]
        pb.mutations.extend(out)
        if strict:
            if pb.WhichOneof("transaction") == "single_use_transaction":
                begin = _PB["BeginTransactionRequest"](
                    session=pb.session, options=pb.single_use_transaction
                )
                pb.transaction_id = self.pb_call(
                    "BeginTransaction", begin, "Transaction", context
                ).id
            for q, key in strict:
                read = _PB["ReadRequest"](session=pb.session, table=q.name, columns=[q.keys[0]])
                read.transaction.id = pb.transaction_id
                read.key_set.keys.add().CopyFrom(key)
                if not self.pb_call("Read", read, "ResultSet", context).rows:
                    rollback = _PB["RollbackRequest"](
                        session=pb.session, transaction_id=pb.transaction_id
                    )
                    self.call(_SPANNER + "Rollback", rollback.SerializeToString(), context)
                    raise Rejected(
                        grpc.StatusCode.NOT_FOUND, f"Message not found in queue {q.name}"
                    )
        response = self.call(_SPANNER + "Commit", pb.SerializeToString(), context)
        self.leases.wake(db)
        return response


def _metadata(context: Any) -> list[tuple[str, Any]]:
    return [
        (k, v)
        for k, v in context.invocation_metadata()
        if not k.startswith((":", "grpc-")) and k not in ("user-agent", "te", "content-type")
    ]


def _relay(exc: Any, context: Any) -> None:
    trailers = list(exc.trailing_metadata() or ())
    if exc.code() is grpc.StatusCode.ABORTED and not any(
        k == "google.rpc.retryinfo-bin" for k, _ in trailers
    ):
        retry = RetryInfo(retry_delay=Duration(nanos=10_000_000))
        trailers.append(("google.rpc.retryinfo-bin", retry.SerializeToString()))
    context.set_trailing_metadata(trailers)
    context.abort(exc.code(), exc.details())


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, interposer: Interposer) -> None:
        self._i = interposer

    def service(self, details: Any) -> Any:
        method: str = details.method
        if method in _STREAMING:
            return grpc.unary_stream_rpc_method_handler(lambda r, c: self._stream(method, r, c))
        return grpc.unary_unary_rpc_method_handler(lambda r, c: self._unary(method, r, c))

    def _unary(self, method: str, request: bytes, context: Any) -> bytes:
        with self._i._lock:
            self._i.calls[method.rsplit("/", 1)[-1]] += 1
        try:
            if method == _DDL:
                return self._i.update_ddl(request, context)
            if method == _SPANNER + "Commit":
                return self._i.commit(request, context)
            if method == _SPANNER + "BeginTransaction":
                return self._i.begin_transaction(request, context)
            if method == _SPANNER + "ExecuteSql":
                self._i.refuse_update(_PB["ExecuteSqlRequest"].FromString(request))
            elif method == _SPANNER + "ExecuteBatchDml":
                batch = _PB["ExecuteBatchDmlRequest"].FromString(request)
                for statement in batch.statements:
                    self._i.refuse_update_sql(batch.session, statement.sql)
            return self._i.call(method, request, context)
        except Rejected as exc:
            context.abort(exc.code, str(exc))
            raise

    def _stream(self, method: str, request: bytes, context: Any) -> Any:
        statement = None
        if method == _SPANNER + "ExecuteStreamingSql":
            pb = _PB["ExecuteSqlRequest"].FromString(request)
            try:
                self._i.refuse_update(pb)
                statement = queue_statement(self._i, pb)
            except Rejected as exc:
                context.abort(exc.code, str(exc))
        if statement is None:
            yield from self._i.stream(method, request, context)
            return
        try:
            for part in statement.run(self._i, context):
                yield part.SerializeToString()
        except Rejected as exc:
            context.abort(exc.code, str(exc))
