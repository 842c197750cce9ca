"""The interposer's SQL half: queue DDL, and RECEIVE_ / RENEWLEASE_ statements.

Only the documented shapes are recognised (``queues-using``): GoogleSQL
``SELECT cols FROM RECEIVE_q(max_duration=>'20m', max_batch_size=>20)`` and
``RENEWLEASE_q(lease_tokens => @tokens)``; PostgreSQL
``spanner.receive_q(20, NULL, '20m')`` and ``spanner.renewlease_q($1)``. A
statement of another shape, or for a queue of the other dialect, is not
translated: the emulator then rejects it as the unknown function it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from google.cloud import spanner_v1
from google.cloud.spanner_v1.types import type as type_pb
from google.protobuf.struct_pb2 import Value

_Code = type_pb.TypeCode
_PartialResultSet = spanner_v1.PartialResultSet.pb()


class Rejected(Exception):
    """A call the stand-in refuses, as Spanner would, with a gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class QueueDef:
    """A queue as its DDL declared it."""

    name: str
    keys: tuple[str, ...]
    key_codes: tuple[int, ...]
    payload: str
    payload_code: int
    postgres: bool

    def col(self, gsql: str, pg: str) -> str:
        return pg if self.postgres else gsql

    @property
    def deliver(self) -> str:
        return self.col("DeliverTime", "deliver_time")


def _type_code(text: str) -> int:
    t = text.lower()
    for prefixes, code in (
        (("int64", "bigint", "int8"), _Code.INT64),
        (("string", "varchar", "text", "character"), _Code.STRING),
        (("bytes", "bytea"), _Code.BYTES),
        (("json",), _Code.JSON),
    ):
        if t.startswith(prefixes):
            return int(code)
    raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported queue column type {text!r}")


def _split(text: str) -> list[str]:
    """Split at commas outside parentheses and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [p for p in [*parts, text[start:].strip()] if p]


_CREATE = re.compile(r"\s*CREATE\s+QUEUE\s+(IF\s+NOT\s+EXISTS\s+)?([A-Za-z_]\w*)\s*\(", re.I)
_DROP = re.compile(r"\s*DROP\s+QUEUE\s+(IF\s+EXISTS\s+)?([A-Za-z_]\w*)\s*$", re.I)
_PK = re.compile(r"\s*PRIMARY\s+KEY\s*\(([^)]*)\)", re.I)


def translate_ddl(statement: str) -> tuple[str, QueueDef | None]:
    """``CREATE QUEUE`` as ``CREATE TABLE`` with the system and lease columns."""
    drop = _DROP.fullmatch(statement)
    if drop:
        return f"DROP TABLE {drop.group(1) or ''}{drop.group(2)}", None
    m = _CREATE.match(statement)
    if m is None:
        return statement, None
    depth, close = 0, len(statement)
    for close in range(m.end() - 1, len(statement)):
        depth += {"(": 1, ")": -1}.get(statement[close], 0)
        if depth == 0:
            break
    parts, rest = _split(statement[m.end() : close]), statement[close + 1 :]
    pk_inside = [p for p in parts if _PK.fullmatch(p)]
    pk = _PK.match(pk_inside[0] if pk_inside else rest)
    if pk is None:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "CREATE QUEUE needs a PRIMARY KEY")
    columns = {p.split()[0].lower(): p.split() for p in parts if p not in pk_inside}
    keys = [k.strip() for k in pk.group(1).split(",")]
    payload = [c for c in columns.values() if c[0].lower() == "payload"]
    if not payload or any(k.lower() not in columns for k in keys):
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "a queue has key columns and Payload")
    postgres = bool(pk_inside)
    queue = QueueDef(
        m.group(2),
        tuple(columns[k.lower()][0] for k in keys),
        tuple(_type_code(columns[k.lower()][1]) for k in keys),
        payload[0][0],
        _type_code(payload[0][1]),
        postgres,
    )
    extra = (
        "deliver_time timestamptz NOT NULL, emu_lease_token varchar, "
        "emu_lease_expiry timestamptz, emu_visible_at timestamptz, emu_deliveries bigint"
        if postgres
        else "DeliverTime TIMESTAMP NOT NULL, emu_lease_token STRING(MAX), "
        "emu_lease_expiry TIMESTAMP, emu_visible_at TIMESTAMP, emu_deliveries INT64"
    )
    body = ", ".join([p for p in parts if p not in pk_inside] + [extra] + pk_inside)
    return f"CREATE TABLE {m.group(1) or ''}{m.group(2)} ({body}){rest}", queue


def ts(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


#: The one form of a RECEIVE duration the documents show: whole minutes ('20m').
_MINUTES = re.compile(r"([1-9]\d*)m")


def _duration(text: str, zero_allowed: bool) -> float:
    """Seconds of a RECEIVE's ``max_duration``. Only the documents' form is taken;
    ``'0s'`` (no document shows it, and they advise against extremely short
    durations) only for a database whose test asked for it (``receive_short=0s``)."""
    minutes = _MINUTES.fullmatch(text)
    if minutes is not None:
        return 60.0 * int(minutes.group(1))
    if text == "0s" and zero_allowed:
        return 0.0
    raise Rejected(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"max_duration {text!r}: this stand-in takes only the documents' form, whole "
        "minutes such as '20m' ('0s' only where the test asked for receive_short=0s)",
    )


def _statement(kind: str, postgres: bool) -> re.Pattern[str]:
    fn = rf"spanner\.{kind.lower()}_" if postgres else rf"(?<!\.){kind}_"
    return re.compile(
        rf"\s*SELECT\s+(?P<cols>.+?)\s+FROM\s+{fn}(?P<q>\w+)\s*\((?P<args>.*)\)\s*;?\s*",
        re.I | re.S,
    )


def _literal(text: str, params: Any) -> Value:
    text = text.strip()
    if text.upper() == "NULL":
        return Value(null_value=0)
    if re.fullmatch(r"\d+", text):
        return Value(string_value=text)
    if re.fullmatch(r"'[^']*'", text):
        return Value(string_value=text[1:-1])
    param = re.fullmatch(r"@(\w+)|\$(\d+)", text)
    if param and (param.group(1) or f"p{param.group(2)}") in params.fields:
        return params.fields[param.group(1) or f"p{param.group(2)}"]
    array = re.fullmatch(r"(?:ARRAY\s*)?\[(.*)\]", text, re.I | re.S)
    if array:
        values = [_literal(p, params) for p in _split(array.group(1))]
        out = Value()
        out.list_value.values.extend(values)
        return out
    raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"cannot evaluate argument {text!r}")


def _field(name: str, code: int, postgres: bool = False) -> Any:
    annotation = type_pb.TypeAnnotationCode.PG_JSONB if postgres and code == _Code.JSON else 0
    return type_pb.StructType.Field(
        name=name, type_=type_pb.Type(code=code, type_annotation=annotation)
    )


def _value(v: Any, code: int) -> Value:
    if v is None:
        return Value(null_value=0)
    if code == _Code.BOOL:
        return Value(bool_value=bool(v))
    if code == _Code.TIMESTAMP:
        return Value(string_value=ts(v))
    return Value(string_value=v.decode() if isinstance(v, bytes) else str(v))


@dataclass
class _Statement:
    db: str
    queue: QueueDef
    columns: list[tuple[int, Any]]  # (index into the row, result field)
    args: dict[str, Value]

    def _metadata(self) -> Any:
        metadata = _PartialResultSet()
        metadata.metadata.row_type.CopyFrom(
            type_pb.StructType.pb(type_pb.StructType(fields=[f for _, f in self.columns]))
        )
        return metadata


def _columns(text: str, available: list[Any]) -> list[tuple[int, Any]]:
    if text.strip() == "*":
        return list(enumerate(available))
    out = []
    for name in _split(text):
        index = next((i for i, f in enumerate(available) if f.name.lower() == name.lower()), None)
        if index is None:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"Unrecognized name: {name}")
        out.append((index, available[index]))
    return out


class Receive(_Statement):
    def run(self, interposer: Any, context: Any) -> Iterator[Any]:
        batch_value, duration_value = self.args.get("max_batch_size"), self.args.get("max_duration")
        batch = int(batch_value.string_value) if batch_value and batch_value.string_value else 1
        duration = 1200.0
        if duration_value is not None and duration_value.HasField("string_value"):
            with interposer._lock:
                interposer.durations[self.db].append(duration_value.string_value)
            duration = _duration(duration_value.string_value, interposer.zero_allowed(self.db))
        if batch < 1:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "max_batch_size must be positive")
        clock = interposer.leases.clock(self.db)
        end = clock.monotonic() + duration
        yield self._metadata()
        opened = (self.db, self.queue.name.lower())
        with interposer._lock:
            interposer.receiving[opened] += 1
        try:
            yield from self._batches(interposer, context, batch, end)
        finally:
            with interposer._lock:
                interposer.receiving[opened] -= 1

    def _batches(self, interposer: Any, context: Any, batch: int, end: float) -> Iterator[Any]:
        clock = interposer.leases.clock(self.db)
        n = 0
        while context.is_active():
            leased = interposer.leases.lease(self.db, self.queue, batch, context.is_active)
            if leased:
                n += 1
                part = _PartialResultSet(resume_token=f"batch-{n}".encode())
                for i, (row, token, expiry) in enumerate(leased):
                    full = [*row, expiry, token, i == len(leased) - 1]
                    part.values.extend(_value(full[c], f.type_.code) for c, f in self.columns)
                yield part
                continue
            if clock.monotonic() >= end:
                return
            interposer.leases.wait(self.db, self.queue, end, context)


class Renew(_Statement):
    def run(self, interposer: Any, context: Any) -> Iterator[Any]:
        tokens = self.args.get("lease_tokens")
        if tokens is None or not tokens.HasField("list_value"):
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "lease_tokens must be an array")
        strings = [v.string_value for v in tokens.list_value.values if v.HasField("string_value")]
        part = self._metadata()
        for row in interposer.leases.renew(self.db, self.queue, strings):
            part.values.extend(_value(row[c], f.type_.code) for c, f in self.columns)
        yield part


def queue_statement(interposer: Any, request: Any) -> Receive | Renew | None:
    """The RECEIVE or RENEWLEASE in this ExecuteSqlRequest, or None to forward it."""
    db = request.session.split("/sessions/")[0]
    for kind, postgres in (
        ("RECEIVE", False),
        ("RECEIVE", True),
        ("RENEWLEASE", False),
        ("RENEWLEASE", True),
    ):
        m = _statement(kind, postgres).fullmatch(request.sql)
        queue = m and interposer._queues.get(db, {}).get(m.group("q").lower())
        if not m or queue is None or queue.postgres != postgres:
            continue
        parts = _split(m.group("args"))
        q = queue
        selector = request.transaction.WhichOneof("selector")
        if kind == "RECEIVE":
            if selector not in (None, "single_use") or (
                selector == "single_use" and not request.transaction.single_use.read_only.strong
            ):
                raise Rejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "RECEIVE must be a strong read (Spanner rejects stale reads)",
                )
            names = ["max_batch_size", None, "max_duration"]
            available = [
                *(_field(k, c) for k, c in zip(q.keys, q.key_codes, strict=True)),
                _field(q.payload, q.payload_code, postgres),
                _field(q.deliver, _Code.TIMESTAMP),
                _field(
                    q.col("SpannerLeaseExpirationTimestamp", "spanner_lease_expiration_timestamp"),
                    _Code.TIMESTAMP,
                ),
                _field(q.col("SpannerLeaseToken", "spanner_lease_token"), _Code.STRING),
                _field(q.col("SpannerLastBatchMessage", "spanner_last_batch_message"), _Code.BOOL),
            ]
        else:
            if selector not in (None, "single_use"):
                # The documents renew in a single-use read (the Go sample's
                # client.Single()); whether Spanner takes it in a read-write
                # transaction is a question for a real instance.
                raise Rejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "this stand-in takes RENEWLEASE only in a single-use read, as the "
                    "documents send it",
                )
            names = ["lease_tokens"]
            available = [
                _field(q.col("SpannerOldLeaseToken", "spanner_old_lease_token"), _Code.STRING),
                _field(q.col("SpannerNewLeaseToken", "spanner_new_lease_token"), _Code.STRING),
                _field(
                    q.col("SpannerLeaseExpirationTimestamp", "spanner_lease_expiration_timestamp"),
                    _Code.TIMESTAMP,
                ),
            ]
        args: dict[str, Value] = {}
        for position, part in enumerate(parts):
            named = re.fullmatch(r"(\w+)\s*=>\s*(.+)", part, re.S)
            if named is None and (postgres or kind == "RENEWLEASE") and position < len(names):
                name, value = names[position], part
            elif named is not None and named.group(1).lower() in names:
                name, value = named.group(1).lower(), named.group(2)
            else:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, f"unknown argument {part!r}")
            if name is not None:
                args[name] = _literal(value, request.params)
        cls = Receive if kind == "RECEIVE" else Renew
        return cls(db, q, _columns(m.group("cols"), available), args)
    return None
