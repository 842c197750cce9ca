"""The Google Cloud Spanner backend (``spanner://projects/P/instances/I/databases/D``).

Spanner queues are the real thing this contract mirrors; this module maps the
contract onto google-cloud-spanner (>= 3.60) with both SQL dialects:

* ``transact`` is ``Database.run_in_transaction`` (the whole function is re-run
  on ``Aborted``, within ``timeout``); ``tx.send`` / ``tx.ack`` are the client's
  queue mutations, so a duplicate send fails the commit with ALREADY_EXISTS and
  a strict ack of a missing message with NOT_FOUND: both are mapped to agentq's
  errors, and nothing of the transaction is committed.
* ``stream`` is a strong, single-use streaming ``RECEIVE_<queue>`` query, read
  from the raw gRPC stream: the client's resume-token buffering
  (``snapshot.execute_sql``) would hold rows back until the stream ends,
  long after their 10 s leases expired. The call is cancelled when the caller
  stops reading, and re-issued with backoff on UNAVAILABLE.
* ``renew`` is ``RENEWLEASE_<queue>(lease_tokens => ...)`` in a strong snapshot.
* BYTES travel base64-encoded in both directions (the client does not do it).
* The client's built-in metrics are disabled so they cannot take over the
  application's OpenTelemetry meter provider; ``close`` never blocks for long.

The runtime's own state lives in one table, ``agentq_records`` (see :func:`ddl`).
Mutations are invisible to reads in the same Spanner transaction, so the
transaction object keeps its own record writes and answers later reads from
them (read-your-writes, as on SQLite).

DDL is applied by ``agentq init`` (or ``ddl=auto`` in the URL), not on every
start: schema changes on Spanner take long-running operations.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError
from google.cloud import spanner
from google.cloud.spanner_admin_database_v1 import DatabaseDialect
from google.cloud.spanner_v1 import (
    ExecuteSqlRequest,
    TransactionOptions,
    TransactionSelector,
    param_types,
)
from google.cloud.spanner_v1.database_sessions_manager import TransactionType
from google.cloud.spanner_v1.keyset import KeySet
from google.cloud.spanner_v1.streamed import StreamedResultSet

from agentq.backends.base import (
    EncodedRecord,
    Message,
    QueueStats,
    RedeliveryPolicy,
    Renewal,
    StoredRecord,
    Transaction,
    check_stream_args,
    record_text,
)
from agentq.backends.notify import Notifier, Wake
from agentq.clock import Clock, SystemClock
from agentq.errors import (
    BackendUnavailable,
    ConfigError,
    DuplicateKey,
    MessageNotFound,
    QueueNotFound,
    TransactionAborted,
    TransactionError,
)
from agentq.spec import KeyType, PayloadType, QueueSpec, check_new_queue_name, validate_identifier

__all__ = ["SpannerBackend", "ddl", "open_spanner"]

T = TypeVar("T")

RECORDS = "agentq_records"
_URL = re.compile(r"^/?projects/([^/]+)/instances/([^/]+)/databases/([^/]+)$")


class Dialect:
    """SQL text that differs between GoogleSQL and PostgreSQL databases."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres

    def ident(self, name: str) -> str:
        # PostgreSQL folds unquoted identifiers to lower case; queues and their
        # TVFs are addressed in lower case there.
        return name.lower() if self.postgres else name

    def params(self, names: Sequence[str]) -> list[str]:
        return (
            [f"${i}" for i in range(1, len(names) + 1)]
            if self.postgres
            else [f"@{n}" for n in names]
        )

    def param_dict(self, names: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
        keys = [f"p{i}" for i in range(1, len(names) + 1)] if self.postgres else list(names)
        return dict(zip(keys, values, strict=True))

    def param_keys(self, names: Sequence[str]) -> list[str]:
        return [f"p{i}" for i in range(1, len(names) + 1)] if self.postgres else list(names)

    def receive_sql(self, spec: QueueSpec, max_batch_size: int, seconds: int) -> str:
        keys = ", ".join(self.ident(c.name) for c in spec.key)
        if self.postgres:
            return (
                f"SELECT {keys}, payload, deliver_time, spanner_lease_expiration_timestamp, "
                "spanner_lease_token, spanner_last_batch_message "
                f"FROM spanner.receive_{self.ident(spec.name)}({max_batch_size}, NULL, '{seconds}s')"
            )
        return (
            f"SELECT {keys}, Payload, DeliverTime, SpannerLeaseExpirationTimestamp, "
            "SpannerLeaseToken, SpannerLastBatchMessage "
            f"FROM RECEIVE_{spec.name}(max_duration=>'{seconds}s', max_batch_size=>{max_batch_size})"
        )

    def renew_sql(self, queue: str) -> str:
        if self.postgres:
            return (
                "SELECT spanner_old_lease_token, spanner_new_lease_token, "
                f"spanner_lease_expiration_timestamp FROM spanner.renewlease_{self.ident(queue)}($1)"
            )
        return (
            "SELECT SpannerOldLeaseToken, SpannerNewLeaseToken, SpannerLeaseExpirationTimestamp "
            f"FROM RENEWLEASE_{queue}(lease_tokens => @tokens)"
        )

    def record_select(self) -> str:
        t, k = self.params(["tbl", "k"])
        return f"SELECT v FROM {RECORDS} WHERE tbl = {t} AND k = {k}"

    def record_scan(self) -> str:
        t, k = self.params(["tbl", "prefix"])
        return f"SELECT k, v FROM {RECORDS} WHERE tbl = {t} AND k >= {k} ORDER BY k"

    def stats_sql(self, spec: QueueSpec) -> str:
        deliver = "deliver_time" if self.postgres else "DeliverTime"
        now = "CURRENT_TIMESTAMP" if self.postgres else "CURRENT_TIMESTAMP()"
        ready = f"COALESCE(SUM(CASE WHEN {deliver} <= {now} THEN 1 ELSE 0 END), 0)"
        scheduled = f"COALESCE(SUM(CASE WHEN {deliver} > {now} THEN 1 ELSE 0 END), 0)"
        return f"SELECT COUNT(*), {ready}, {scheduled}, MIN({deliver}) FROM {self.ident(spec.name)}"


def ddl(specs: Sequence[QueueSpec], *, postgres: bool = False) -> list[str]:
    """``CREATE`` statements for the runtime's table and the given queues."""
    d = Dialect(postgres)
    if postgres:
        stmts = [
            f"CREATE TABLE IF NOT EXISTS {RECORDS} (tbl varchar(128) NOT NULL, k varchar NOT NULL, "
            "v varchar NOT NULL, PRIMARY KEY (tbl, k))"
        ]
    else:
        stmts = [
            f"CREATE TABLE IF NOT EXISTS {RECORDS} (tbl STRING(128) NOT NULL, k STRING(MAX) NOT NULL, "
            "v STRING(MAX) NOT NULL) PRIMARY KEY (tbl, k)"
        ]
    gsql_types = {KeyType.INT: "INT64", KeyType.STR: "STRING(MAX)", KeyType.BYTES: "BYTES(MAX)"}
    pg_types = {KeyType.INT: "bigint", KeyType.STR: "varchar", KeyType.BYTES: "bytea"}
    for spec in specs:
        ttl_days = None
        if spec.ttl is not None:
            days = spec.ttl.total_seconds() / 86400
            if days != int(days):
                raise ConfigError(
                    f"queue {spec.name!r}: Spanner row deletion policies take whole days; "
                    f"ttl={spec.ttl} is not"
                )
            ttl_days = int(days)
        keys = ", ".join(d.ident(c.name) for c in spec.key)
        if postgres:
            cols = [f"{d.ident(c.name)} {pg_types[c.type]} NOT NULL" for c in spec.key]
            payload = "bytea" if spec.payload is PayloadType.BYTES else "jsonb"
            stmt = (
                f"CREATE QUEUE IF NOT EXISTS {d.ident(spec.name)} ({', '.join(cols)}, "
                f"payload {payload} NOT NULL, PRIMARY KEY ({keys}))"
            )
            if spec.parent:
                stmt += f" INTERLEAVE IN PARENT {d.ident(spec.parent)} ON DELETE CASCADE"
            if ttl_days is not None:
                stmt += f" TTL INTERVAL '{ttl_days} days' ON deliver_time"
        else:
            cols = [f"{c.name} {gsql_types[c.type]} NOT NULL" for c in spec.key]
            payload = "BYTES(MAX)" if spec.payload is PayloadType.BYTES else "JSON"
            stmt = (
                f"CREATE QUEUE IF NOT EXISTS {spec.name} ({', '.join(cols)}, "
                f"Payload {payload} NOT NULL) PRIMARY KEY ({keys})"
            )
            if spec.parent:
                stmt += f", INTERLEAVE IN PARENT {spec.parent} ON DELETE CASCADE"
            if ttl_days is not None:
                stmt += f", ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL {ttl_days} DAY))"
        stmts.append(stmt)
    return stmts


def _wire_key(spec: QueueSpec, key: Sequence[Any]) -> list[Any]:
    # BYTES key parts travel base64-encoded, like payloads.
    return [
        base64.b64encode(v).decode() if c.type is KeyType.BYTES else v
        for c, v in zip(spec.key, key, strict=True)
    ]


def _from_wire(value: Any, key_type: KeyType) -> Any:
    if key_type is KeyType.BYTES:
        return base64.b64decode(value)
    return value


def _utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


class _SpannerTransaction(Transaction):
    def __init__(self, backend: SpannerBackend, txn: Any, now: datetime) -> None:
        self._backend = backend
        self._txn = txn
        self._now = now
        self._records: dict[tuple[str, str], dict[str, Any] | None] = {}
        self.strict_acks = 0
        self.sent = False

    @property
    def now(self) -> datetime:
        return self._now

    def send(
        self,
        queue: str,
        key: Sequence[Any] | Any,
        payload: Any,
        deliver_time: datetime | None = None,
    ) -> None:
        spec = self._backend.queue_spec(queue)
        parts = spec.check_key(key)
        data = spec.encode_payload(payload)
        wire: Any = base64.b64encode(data) if spec.payload is PayloadType.BYTES else data.decode()
        when = None if deliver_time is None else max(deliver_time, self._now)
        self._txn.send(queue, _wire_key(spec, parts), payload=wire, deliver_time=when)
        self.sent = True

    def ack(self, queue: str, key: Sequence[Any] | Any, must_exist: bool = True) -> bool:
        spec = self._backend.queue_spec(queue)
        parts = spec.check_key(key)
        # An Ack mutation without ignore_not_found fails the commit with NOT_FOUND when
        # the message is gone: nothing of this transaction is then committed. A blind
        # ack cannot tell whether a message existed; it reports True.
        self._txn.ack(queue, _wire_key(spec, parts), ignore_not_found=not must_exist)
        if must_exist:
            self.strict_acks += 1
        return True

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        named = self._backend._named_params(params)
        if re.match(r"^\s*(SELECT|WITH)\b", sql, re.I):
            return [tuple(row) for row in self._txn.execute_sql(sql, params=named or None)]
        count = self._txn.execute_update(sql, params=named or None)
        return [(count,)]

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        if (table, key) in self._records:
            cached = self._records[(table, key)]
            return None if cached is None else json.loads(json.dumps(cached))
        d = self._backend.dialect
        rows = list(
            self._txn.execute_sql(
                d.record_select(), params=d.param_dict(["tbl", "k"], [table, key])
            )
        )
        return None if not rows else dict(json.loads(rows[0][0]))

    def put_record(self, table: str, key: str, value: Mapping[str, Any] | EncodedRecord) -> None:
        validate_identifier(table, "record table")
        text = record_text(value)
        self._txn.insert_or_update(RECORDS, columns=("tbl", "k", "v"), values=[(table, key, text)])
        self._records[(table, key)] = json.loads(text)

    def insert_record(self, table: str, key: str, value: Mapping[str, Any]) -> bool:
        if self.get_record(table, key) is not None:
            return False
        self.put_record(table, key, value)
        return True

    def delete_record(self, table: str, key: str) -> bool:
        existed = self.get_record(table, key) is not None
        if existed:
            self._txn.delete(RECORDS, KeySet(keys=[[table, key]]))
            self._records[(table, key)] = None
        return existed

    def replace_records(
        self, table: str, items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord]]
    ) -> list[str]:
        d = self._backend.dialect
        changed = []
        for key, version, value in items:
            if (table, key) in self._records:
                changed.append(key)  # written in this transaction: not the version read
                continue
            rows = list(
                self._txn.execute_sql(
                    d.record_select(), params=d.param_dict(["tbl", "k"], [table, key])
                )
            )
            if not rows or rows[0][0] != version:
                changed.append(key)
                continue
            self.put_record(table, key, value)
        return changed


class SpannerBackend:
    """Spanner-queue contract on Google Cloud Spanner."""

    def __init__(
        self,
        database: Any,
        *,
        url: str,
        postgres: bool,
        clock: Clock | None = None,
        redelivery: RedeliveryPolicy | None = None,
        transaction_timeout: float = 60.0,
        auto_ddl: bool = False,
        unavailable_backoff: float = 0.5,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        # Spanner decides redelivery itself; the policy here only documents it.
        self.redelivery = redelivery or RedeliveryPolicy()
        self.ordered_keys = False  # keys growing with time would hotspot one split
        self.single_writer = False
        self.database = database
        self.dialect = Dialect(postgres)
        self.transaction_timeout = transaction_timeout
        self.auto_ddl = auto_ddl
        self.unavailable_backoff = unavailable_backoff
        self._url = url
        self._specs: dict[str, QueueSpec] = {}
        self._calls: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = False
        # Commits here wake this process's waiters at once; other processes'
        # commits are only seen by re-reading, every commit_poll_interval seconds
        # (Spanner has no change notification short of a change stream).
        self._commits = Notifier()
        self.commit_poll_interval: float | None = 0.5

    @property
    def url(self) -> str:
        return self._url

    def subscribe_commits(self, wake: Wake) -> None:
        self._commits.subscribe(wake)

    def unsubscribe_commits(self, wake: Wake) -> None:
        self._commits.unsubscribe(wake)

    # -- queues and DDL ------------------------------------------------------------

    def create_queue(self, spec: QueueSpec) -> None:
        """Register the queue; with ``ddl=auto`` also create it (``agentq init`` does
        that for every queue in one schema change)."""
        existing = self._specs.get(spec.name)
        if existing is not None and existing != spec:
            raise ConfigError(f"queue {spec.name!r} already exists with a different spec")
        check_new_queue_name(spec.name, self._specs)
        ddl([spec], postgres=self.dialect.postgres)  # validates what Spanner cannot express
        self._specs[spec.name] = spec
        if self.auto_ddl:
            self.apply_ddl([spec])

    def ddl(self) -> list[str]:
        """DDL for every registered queue and the runtime's table."""
        return ddl(
            sorted(self._specs.values(), key=lambda s: s.name), postgres=self.dialect.postgres
        )

    def apply_ddl(self, specs: Sequence[QueueSpec] | None = None, timeout: float = 600) -> None:
        """Apply the DDL with ``update_ddl`` and wait for the operation."""
        statements = ddl(specs, postgres=self.dialect.postgres) if specs is not None else self.ddl()
        try:
            self.database.update_ddl(statements).result(timeout)
        except gexc.GoogleAPICallError as exc:
            raise BackendUnavailable(f"applying DDL failed: {exc.message}") from exc

    def queue_spec(self, name: str) -> QueueSpec:
        spec = self._specs.get(name)
        if spec is None:
            validate_identifier(name, "queue name")
            raise QueueNotFound(f"queue {name!r} is not registered; create it first")
        return spec

    def queues(self) -> list[str]:
        return sorted(self._specs)

    # -- transactions ---------------------------------------------------------------

    def _named_params(self, params: Sequence[Any] | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(params, Mapping):
            return dict(params)
        if not params:
            return {}
        if self.dialect.postgres:
            return {f"p{i}": v for i, v in enumerate(params, start=1)}
        raise ConfigError("GoogleSQL takes named parameters: pass a dict for @name placeholders")

    def transact(self, fn: Callable[[Transaction], T], *, durable: bool = True) -> T:
        # Every Spanner commit is durable; ``durable`` is accepted for the contract.
        if self._closed:
            raise BackendUnavailable("backend is closed")
        state: dict[str, _SpannerTransaction] = {}

        def work(txn: Any) -> T:
            tx = _SpannerTransaction(self, txn, self.clock.now())
            state["tx"] = tx
            return fn(tx)

        try:
            result: T = self.database.run_in_transaction(
                work, timeout_secs=self.transaction_timeout
            )
            self._commits.notify()
            return result
        except gexc.AlreadyExists as exc:
            raise DuplicateKey(f"a message with this key already exists: {exc.message}") from exc
        except gexc.NotFound as exc:
            tx = state.get("tx")
            if tx is not None and tx.strict_acks:
                raise MessageNotFound(
                    f"ack of a message that is gone (already acknowledged): {exc.message}"
                ) from exc
            raise TransactionError(f"not found: {exc.message}") from exc
        except gexc.OutOfRange as exc:
            raise MessageNotFound(f"ASSERT_ROWS_MODIFIED failed: {exc.message}") from exc
        except gexc.Aborted as exc:
            raise TransactionAborted(f"transaction kept aborting: {exc.message}") from exc
        except (gexc.ServiceUnavailable, gexc.DeadlineExceeded) as exc:
            # The commit outcome is unknown: callers must treat it as "maybe".
            raise BackendUnavailable(
                f"Spanner unavailable (commit outcome unknown): {exc}"
            ) from exc
        except gexc.GoogleAPICallError as exc:
            raise TransactionError(f"transaction failed: {exc.message}") from exc
        except RuntimeError as exc:
            if "nested" in str(exc).lower():
                raise TransactionError("transactions cannot be nested") from exc
            raise

    # -- receiving ------------------------------------------------------------------

    def stream(
        self, queue: str, max_batch_size: int = 1, max_duration: float = 0.0
    ) -> Iterator[list[Message]]:
        check_stream_args(max_batch_size, max_duration)
        spec = self.queue_spec(queue)
        return self._stream(spec, max_batch_size, max_duration)

    def _stream(
        self, spec: QueueSpec, max_batch_size: int, max_duration: float
    ) -> Iterator[list[Message]]:
        deadline = self.clock.monotonic() + max_duration
        failures = 0
        first = True
        while not self._closed:
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0 and not first:
                return
            first = False
            seconds = max(int(remaining + 0.999), 0)
            sql = self.dialect.receive_sql(spec, max_batch_size, seconds)
            try:
                yield from self._receive_once(spec, sql)
                failures = 0
            except (gexc.ServiceUnavailable, gexc.InternalServerError) as exc:
                failures += 1
                if self.clock.monotonic() >= deadline:
                    return
                delay = min(self.unavailable_backoff * 2 ** (failures - 1), 10.0)
                if failures > 8:
                    raise BackendUnavailable(f"RECEIVE kept failing: {exc}") from exc
                self.clock.sleep(delay)
            except gexc.GoogleAPICallError as exc:
                raise BackendUnavailable(f"RECEIVE from {spec.name!r} failed: {exc}") from exc

    def _receive_once(self, spec: QueueSpec, sql: str) -> Iterator[list[Message]]:
        """One RECEIVE call on the raw stream, batches yielded as their last row arrives."""
        database = self.database
        session = database.sessions_manager.get_session(TransactionType.READ_ONLY)
        request = ExecuteSqlRequest(
            session=session.name,
            sql=sql,
            transaction=TransactionSelector(
                single_use=TransactionOptions(read_only=TransactionOptions.ReadOnly(strong=True))
            ),
        )
        call = database.spanner_api.execute_streaming_sql(
            request=request,
            metadata=[("google-cloud-resource-prefix", database.name)],
            timeout=max(self.transaction_timeout, 3600),
        )
        with self._lock:
            self._calls.add(call)
        nkeys = len(spec.key)
        batch: list[Message] = []
        try:
            for row in StreamedResultSet(call):
                key = tuple(
                    _from_wire(v, c.type) for v, c in zip(row[:nkeys], spec.key, strict=True)
                )
                payload, deliver, expiry, token, last = row[nkeys : nkeys + 5]
                if spec.payload is PayloadType.BYTES:
                    data = base64.b64decode(payload)
                elif isinstance(payload, str | bytes):
                    data = payload.encode() if isinstance(payload, str) else payload
                else:
                    data = json.dumps(payload).encode()
                batch.append(
                    Message(
                        queue=spec.name, key=key, payload=spec.decode_payload(data),
                        deliver_time=_utc(deliver), lease_token=str(token),
                        lease_expiry=_utc(expiry), last_in_batch=bool(last),
                    )
                )  # fmt: skip
                if last:
                    out, batch = batch, []
                    yield out
            if batch:
                batch[-1] = _replace_last(batch[-1])
                yield batch
        finally:
            # The caller stopped reading (or the stream ended): cancel the RPC so the
            # server stops leasing messages to a reader that is gone.
            call.cancel()
            with self._lock:
                self._calls.discard(call)
            database.sessions_manager.put_session(session)

    def renew(self, queue: str, tokens: Sequence[str]) -> list[Renewal]:
        self.queue_spec(queue)
        tokens = [t for t in tokens if isinstance(t, str)]
        if not tokens:
            return []
        d = self.dialect
        key = "p1" if d.postgres else "tokens"
        try:
            with self.database.snapshot() as snap:  # strong single-use read
                rows = list(
                    snap.execute_sql(
                        d.renew_sql(queue),
                        params={key: list(tokens)},
                        param_types={key: param_types.Array(param_types.STRING)},
                    )
                )
        except gexc.GoogleAPICallError as exc:
            raise BackendUnavailable(f"RENEWLEASE on {queue!r} failed: {exc}") from exc
        return [
            Renewal(str(old), None if new is None else str(new), _utc(exp))
            for old, new, exp in rows
        ]

    # -- inspection and records -----------------------------------------------------------

    def stats(self, queue: str) -> QueueStats:
        """Depth, ready and scheduled from the queue table. Leases, expirations and TTL
        drops are reported by Spanner's queue metrics in Cloud Monitoring, not by SQL,
        so they are None here."""
        spec = self.queue_spec(queue)
        with self.database.snapshot() as snap:
            [(total, ready, scheduled, oldest)] = list(
                snap.execute_sql(self.dialect.stats_sql(spec))
            )
        age = None if oldest is None else (self.clock.now() - _utc(oldest)).total_seconds()
        return QueueStats(
            queue=queue, depth=int(total), ready=int(ready), scheduled=int(scheduled),
            leased=None, backing_off=None, oldest_unacked_age=age, lease_expirations=None,
            ttl_dropped=None,
        )  # fmt: skip

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        d = self.dialect
        with self.database.snapshot() as snap:
            rows = list(
                snap.execute_sql(d.record_select(), params=d.param_dict(["tbl", "k"], [table, key]))
            )
        return None if not rows else dict(json.loads(rows[0][0]))

    def read_records(self, table: str, keys: Sequence[str]) -> dict[str, StoredRecord]:
        d = self.dialect
        out: dict[str, StoredRecord] = {}
        with self.database.snapshot(multi_use=True) as snap:
            for key in dict.fromkeys(keys):
                rows = list(
                    snap.execute_sql(
                        d.record_select(), params=d.param_dict(["tbl", "k"], [table, key])
                    )
                )
                if rows:
                    text = str(rows[0][0])
                    out[key] = StoredRecord(value=dict(json.loads(text)), version=text)
        return out

    def list_records(
        self, table: str, prefix: str = "", limit: int | None = None, after: str = ""
    ) -> list[tuple[str, dict[str, Any]]]:
        d = self.dialect
        start = max(prefix, after)  # the scan's lower bound; ``after`` itself is left out
        with self.database.snapshot() as snap:
            rows = list(
                snap.execute_sql(
                    d.record_scan(), params=d.param_dict(["tbl", "prefix"], [table, start])
                )
            )
        out = [
            (str(k), dict(json.loads(v)))
            for k, v in rows
            if str(k).startswith(prefix) and str(k) > after
        ]
        return out if limit is None else out[:limit]

    def close(self) -> None:
        """Cancel open RECEIVE calls and close the client without blocking: the
        library's ``Database.close`` can wait up to 10 minutes for a maintenance
        thread, so it runs in a daemon thread with a short join."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call.cancel()
        closer = threading.Thread(
            target=self.database.close, name="agentq-spanner-close", daemon=True
        )
        closer.start()
        closer.join(2.0)

    def __repr__(self) -> str:
        return f"SpannerBackend({self._url!r})"


def _replace_last(message: Message) -> Message:
    from dataclasses import replace

    return replace(message, last_in_batch=True)


def open_spanner(url: str, clock: Clock | None, options: Mapping[str, Any]) -> SpannerBackend:
    """Open ``spanner://projects/P/instances/I/databases/D[?dialect=postgresql&ddl=auto]``.

    Credentials come from the environment (Application Default Credentials);
    ``SPANNER_EMULATOR_HOST`` is honoured by the client. ``endpoint=HOST:PORT``
    points at a plaintext endpoint with anonymous credentials (tests, emulators).
    """
    parts = urlsplit(url)
    match = _URL.match(parts.netloc + parts.path)
    if match is None:
        raise ConfigError(
            f"invalid Spanner URL {url!r}: expected spanner://projects/P/instances/I/databases/D"
        )
    project, instance, database_id = match.groups()
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"dialect", "ddl", "endpoint"}
    if unknown:
        raise ConfigError(
            f"unknown Spanner URL option(s) {sorted(unknown)} (known: dialect, ddl, endpoint)"
        )
    dialect = query.get("dialect", "googlesql").lower()
    if dialect not in ("googlesql", "postgresql"):
        raise ConfigError(f"dialect must be googlesql or postgresql, not {dialect!r}")
    postgres = dialect == "postgresql"
    kwargs: dict[str, Any] = {"project": project, "disable_builtin_metrics": True}
    if "endpoint" in query:
        kwargs["credentials"] = AnonymousCredentials()
        kwargs["client_options"] = ClientOptions(api_endpoint=query["endpoint"])
    try:
        client = spanner.Client(**kwargs)
    except DefaultCredentialsError as exc:
        raise BackendUnavailable(
            "no Google Cloud credentials for Spanner: run `gcloud auth application-default "
            "login`, set GOOGLE_APPLICATION_CREDENTIALS, or SPANNER_EMULATOR_HOST for an emulator"
        ) from exc
    # The dialect is configured, not discovered: discovery needs admin permissions.
    database = client.instance(instance).database(
        database_id,
        database_dialect=DatabaseDialect.POSTGRESQL
        if postgres
        else DatabaseDialect.GOOGLE_STANDARD_SQL,
    )
    safe_url = url.split("?", 1)[0] + (f"?dialect={dialect}" if postgres else "")
    return SpannerBackend(
        database, url=safe_url, postgres=postgres, clock=clock,
        auto_ddl=query.get("ddl") == "auto", **dict(options),
    )  # fmt: skip
