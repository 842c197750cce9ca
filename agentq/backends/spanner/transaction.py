"""One read-write transaction of the Spanner backend (the contract's ``tx``).

Mutations are invisible to reads in the same Spanner transaction, so the
transaction object keeps its own record writes and answers later reads from
them (read-your-writes, as on SQLite).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud.spanner_v1.keyset import KeySet

from agentq.backends.base import EncodedFields, EncodedRecord, Tally, Transaction
from agentq.backends.owners import record_owner
from agentq.backends.record_filters import record_rare_status
from agentq.backends.record_text import record_text
from agentq.backends.spanner.ddl import OWNER_COLUMN, RARE_COLUMN, TOOL_COLUMN
from agentq.backends.spanner.wire import storable_key, unstorable_key, wire_key, wire_payload
from agentq.backends.tallies import TALLY_TABLE, check_tallies, record_key, record_tally
from agentq.backends.tool_column import record_tool
from agentq.errors import MessageNotFound
from agentq.jsontext import decode
from agentq.spec import validate_identifier

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["SpannerTransaction"]

_ASSERT = re.compile(r"\bASSERT_ROWS_MODIFIED\b", re.I)


class SpannerTransaction(Transaction):
    """The contract's transaction over a client ``Transaction``."""

    def __init__(self, backend: SpannerBackend, txn: Any, now: datetime) -> None:
        self._backend = backend
        self._txn = txn
        self._now = now
        self._records: dict[tuple[str, str], dict[str, Any] | None] = {}
        self.strict_acks = 0
        #: Queues of those acks (a NOT_FOUND at commit checks that they exist).
        self.strict_ack_queues: list[str] = []
        #: Queues this transaction sent to (named in a DuplicateKey error).
        self.sent_queues: list[str] = []
        #: ``(queue, key)`` of every ack (the backend forgets their leases on commit).
        self.acks: list[tuple[str, tuple[Any, ...]]] = []
        #: A failed ``ASSERT_ROWS_MODIFIED``: the transaction must not commit.
        self.failed_assert: MessageNotFound | None = None
        #: The records it wrote, (table, key): their readers are woken after the commit.
        self.written: set[tuple[str, str]] = set()

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
        wire = wire_payload(spec, spec.encode_payload(payload))
        when = None if deliver_time is None else max(deliver_time, self._now)
        physical = self._backend.dialect.physical(queue)
        self._txn.send(physical, wire_key(spec, parts), payload=wire, deliver_time=when)
        if queue not in self.sent_queues:
            self.sent_queues.append(queue)

    def ack(self, queue: str, key: Sequence[Any] | Any, must_exist: bool = True) -> bool:
        spec = self._backend.queue_spec(queue)
        parts = spec.check_key(key)
        # An Ack mutation without ignore_not_found fails the commit with NOT_FOUND when
        # the message is gone: nothing of this transaction is then committed. A blind
        # ack cannot tell whether a message existed; it reports True.
        physical = self._backend.dialect.physical(queue)
        self._txn.ack(physical, wire_key(spec, parts), ignore_not_found=not must_exist)
        self.acks.append((queue, parts))
        if must_exist:
            self.strict_acks += 1
            if queue not in self.strict_ack_queues:
                self.strict_ack_queues.append(queue)
        return True

    def ack_stored(self, queue: str, key: Sequence[Any]) -> bool:
        # Typed key columns: a key as stored is a key of the queue's types.
        return self.ack(queue, tuple(key), must_exist=False)

    def ack_all(self, queue: str, keys: Sequence[Sequence[Any] | Any]) -> None:
        # Ack mutations are buffered and sent with the commit anyway: one per key
        # costs no round trip, and any missing message fails the commit.
        for key in keys:
            self.ack(queue, key, must_exist=True)

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        named = self._backend._named_params(params)
        try:
            if re.match(r"^\s*(SELECT|WITH)\b", sql, re.I):
                return [tuple(row) for row in self._txn.execute_sql(sql, params=named or None)]
            count = self._txn.execute_update(sql, params=named or None)
        except gexc.OutOfRange as exc:
            if not _ASSERT.search(sql):
                raise
            # The documents' at-most-once ack: the message was already deleted.
            self.failed_assert = MessageNotFound(
                f"ASSERT_ROWS_MODIFIED failed (already acknowledged): {exc.message}"
            )
            raise self.failed_assert from exc
        return [(count,)]

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        if not storable_key(key):
            return None  # no record can have this key
        if (table, key) in self._records:
            cached = self._records[(table, key)]
            return None if cached is None else json.loads(json.dumps(cached))
        d = self._backend.dialect
        rows = list(
            self._txn.execute_sql(
                d.record_select(), params=d.param_dict(["tbl", "k"], [table, key])
            )
        )
        return None if not rows else dict(decode(rows[0][0]))

    def get_records(
        self,
        table: str,
        keys: Sequence[str],
        *,
        likely_absent: bool = False,
        lock: bool = False,
    ) -> dict[str, dict[str, Any]]:
        # One point read per key, through get_record's cache of this transaction's
        # own writes (read-your-writes); completions ask for their few joins this way.
        found = {key: self.get_record(table, key) for key in dict.fromkeys(keys)}
        return {key: rec for key, rec in found.items() if rec is not None}

    def put_record(self, table: str, key: str, value: Mapping[str, Any] | EncodedRecord) -> None:
        validate_identifier(table, "record table")
        if not storable_key(key):
            raise unstorable_key(table, key)
        text = record_text(value)
        stored = decode(text)
        if self._backend.rare_column:
            # Every write names the column: an update that left it out would keep
            # the record's former rare status.
            rare = record_rare_status(table, stored)
            columns: tuple[str, ...] = ("tbl", "k", "v", RARE_COLUMN)
            row: tuple[str | None, ...] = (table, key, text, rare)
        else:
            columns, row = ("tbl", "k", "v"), (table, key, text)
        if self._backend.owner_column:  # the same owner at every write of a task
            columns, row = (*columns, OWNER_COLUMN), (*row, record_owner(table, stored))
        if self._backend.tool_column:  # likewise its tool (a run's agent)
            columns, row = (*columns, TOOL_COLUMN), (*row, record_tool(table, stored))
        self._txn.insert_or_update(self._backend.dialect.records, columns=columns, values=[row])
        self._records[(table, key)] = stored
        self.written.add((table, key))

    def update_records(self, table: str, items: Sequence[tuple[str, EncodedFields]]) -> list[str]:
        missing = []
        for key, fields in items:
            rec = self.get_record(table, key)
            if rec is None:
                missing.append(key)
                continue
            rec.update(zip(fields.names, map(decode, fields.values), strict=True))
            self.put_record(table, key, rec)
        return missing

    def insert_record(self, table: str, key: str, value: Mapping[str, Any]) -> bool:
        if self.get_record(table, key) is not None:
            return False
        self.put_record(table, key, value)
        return True

    def delete_record(self, table: str, key: str) -> bool:
        existed = self.get_record(table, key) is not None
        if existed:
            self._txn.delete(self._backend.dialect.records, KeySet(keys=[[table, key]]))
            self._records[(table, key)] = None
            self.written.add((table, key))
        return existed

    def delete_records(self, table: str, keys: Sequence[str]) -> list[str]:
        unique = list(dict.fromkeys(keys))
        found = self.get_records(table, unique)  # one read for all of them
        gone = [k for k in unique if k in found]
        if gone:
            self._txn.delete(
                self._backend.dialect.records, KeySet(keys=[[table, k] for k in gone])
            )
            for k in gone:
                self._records[(table, k)] = None
                self.written.add((table, k))
        return gone

    def replace_records(
        self,
        table: str,
        items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord | EncodedFields]],
    ) -> list[str]:
        d = self._backend.dialect
        changed = []
        for key, version, value in items:
            if not storable_key(key) or (table, key) in self._records:
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
            if isinstance(value, EncodedFields):
                merged = dict(decode(rows[0][0]))
                merged.update(zip(value.names, map(decode, value.values), strict=True))
                value = merged
            self.put_record(table, key, value)
        return changed

    def add_tallies(self, tallies: Sequence[Tally]) -> None:
        # One record per minute under a fresh key: a blind write no other
        # transaction's touches (summed when read).
        check_tallies(tallies)
        for minute, value in record_tally(tallies).items():
            self.put_record(TALLY_TABLE, record_key(minute), value)
