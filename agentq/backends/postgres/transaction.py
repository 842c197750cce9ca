"""The transaction object ``transact(fn)`` hands to ``fn``: send, ack, records and
the application's own SQL (psycopg placeholders: ``%s`` or ``%(name)s``, or
SQLite's ``?``: :mod:`~agentq.backends.postgres.placeholders`), all on the one
connection of the running transaction.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pgerr

from agentq.backends.base import EncodedFields, EncodedRecord, Tally, Transaction
from agentq.backends.postgres import tallies
from agentq.backends.postgres.checks import count_check, is_failure_of
from agentq.backends.postgres.connection import Conn
from agentq.backends.postgres.pipeline import Translate, TxConn, run_or_defer
from agentq.backends.postgres.placeholders import psycopg_placeholders
from agentq.backends.postgres.queues import QueueSQL
from agentq.backends.postgres.records import Records
from agentq.clock import from_micros, to_micros
from agentq.errors import (
    AgentQError,
    DuplicateKey,
    InvalidMessage,
    MessageNotFound,
    TransactionError,
)

__all__ = ["PostgresTransaction"]

# The lease sequence of a new message starts at a random 62-bit value, as on
# SQLite, so a token never matches a later message with the same key. A forked
# child reseeds: it would otherwise draw its parent's next values.
_random = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_random.seed)


class PostgresTransaction(Transaction):
    """One read-write transaction. ``queue_sql(name, conn)`` looks a queue up."""

    def __init__(
        self,
        conn: Conn,
        now: int,
        queue_sql: Callable[[str, Conn], QueueSQL],
        records: Records,
    ) -> None:
        self._conn = conn
        self._now = now
        self._now_dt: datetime | None = None
        self._queue_sql = queue_sql
        self._records = records
        #: Set once a send or strict ack failed: the transaction must not commit
        #: whatever ``fn`` does next (as on Spanner and SQLite).
        self.doomed: TransactionError | None = None
        self.sent: set[str] = set()
        # The records it wrote, (table, key): their readers are woken after the commit.
        self.written: set[tuple[str, str]] = set()

    @property
    def now(self) -> datetime:
        if self._now_dt is None:
            self._now_dt = from_micros(self._now)
        return self._now_dt

    def _doom(self, exc: TransactionError) -> TransactionError:
        self.doomed = exc
        return exc

    def send(
        self,
        queue: str,
        key: Sequence[Any] | Any,
        payload: Any,
        deliver_time: datetime | None = None,
    ) -> None:
        sql = self._queue_sql(queue, self._conn)
        spec = sql.spec
        parts = spec.check_key(key)
        for part in parts:
            if isinstance(part, str) and "\x00" in part:
                raise InvalidMessage(f"queue {queue!r}: a key holds a NUL character")
        data = spec.encode_payload(payload)
        when = self._now if deliver_time is None else to_micros(deliver_time)
        when = max(when, self._now)  # a past delivery time is clamped to now, as Spanner does
        row = (*parts, data, when, when, _random.getrandbits(62))
        if isinstance(self._conn, TxConn):
            # Sent with the transaction's next round trip; a key already taken is
            # reported then, at the latest by the commit (as Spanner does).
            self._conn.defer(sql.insert_strict, row, self._send_failure(sql, parts))
            self.sent.add(queue)
            return
        try:
            cur = self._conn.execute(sql.insert, row)
        except pgerr.ForeignKeyViolation as exc:
            raise self._doom(
                TransactionError(
                    f"queue {queue!r}: no parent row in {spec.parent!r} for key {parts!r}"
                )
            ) from exc
        if cur.rowcount == 0:
            raise self._doom(
                DuplicateKey(f"queue {queue!r} already has a message with key {parts!r}")
            )
        self.sent.add(queue)

    def _send_failure(self, sql: QueueSQL, parts: tuple[Any, ...]) -> Translate:
        """What a held-back send's failure means (None: not about its queue)."""
        queue = sql.spec.name

        def translate(exc: psycopg.Error) -> AgentQError | None:
            diag = exc.diag
            if diag.schema_name != sql.schema or diag.table_name != queue:
                return None
            detail = diag.message_detail or f"key {parts!r}"
            if isinstance(exc, pgerr.UniqueViolation):
                return self._doom(
                    DuplicateKey(f"queue {queue!r} already has a message with this key: {detail}")
                )
            if isinstance(exc, pgerr.ForeignKeyViolation):
                return self._doom(
                    TransactionError(
                        f"queue {queue!r}: no parent row in {sql.spec.parent!r}: {detail}"
                    )
                )
            return None

        return translate

    def ack(self, queue: str, key: Sequence[Any] | Any, must_exist: bool = True) -> bool:
        sql = self._queue_sql(queue, self._conn)
        parts = sql.spec.check_key(key)
        deleted = self._conn.execute(sql.delete, parts).rowcount
        if deleted == 0 and must_exist:
            raise self._doom(
                MessageNotFound(
                    f"queue {queue!r} has no message with key {parts!r} (already acknowledged)"
                )
            )
        return deleted > 0

    def ack_stored(self, queue: str, key: Sequence[Any]) -> bool:
        # Typed key columns: a key as stored is a key of the queue's types.
        return self.ack(queue, tuple(key), must_exist=False)

    def ack_all(self, queue: str, keys: Sequence[Sequence[Any] | Any]) -> None:
        sql = self._queue_sql(queue, self._conn)
        rows = [sql.spec.check_key(key) for key in keys]
        if not rows:
            return
        # Checked in SQL and held back for the next round trip (at the latest the
        # COMMIT's): a message already gone fails the statement, and with it the
        # transaction, which then reports MessageNotFound.
        columns = [list(col) for col in zip(*rows, strict=True)]
        query, params, token = count_check(
            sql.delete_many, columns, len(rows), f"the acks of {len(rows)} message(s)"
        )

        def translate(exc: psycopg.Error) -> AgentQError | None:
            if not is_failure_of(exc, token):
                return None
            return self._doom(
                MessageNotFound(
                    f"queue {queue!r}: of the {len(rows)} messages to acknowledge, some "
                    "have no message (already acknowledged)"
                )
            )

        run_or_defer(self._conn, query, params, translate)

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        # No parameters: the text is sent as it is (a literal % needs no escaping).
        # SQL written for SQLite (``?`` marks) runs too: only the URL changes.
        cur = self._conn.execute(psycopg_placeholders(sql, params), params or None)
        if cur.description is None:
            return []
        return list(cur.fetchall())

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        return self._records.get(self._conn, table, key)

    def get_records(
        self, table: str, keys: Sequence[str], *, likely_absent: bool = False
    ) -> dict[str, dict[str, Any]]:
        return self._records.get_many(self._conn, table, keys, likely_absent=likely_absent)

    def put_record(self, table: str, key: str, value: Mapping[str, Any] | EncodedRecord) -> None:
        self._records.put(self._conn, table, key, value)
        self.written.add((table, key))

    def update_records(self, table: str, items: Sequence[tuple[str, EncodedFields]]) -> list[str]:
        self.written.update((table, key) for key, _ in items)
        return self._records.update(self._conn, table, items)

    def insert_record(self, table: str, key: str, value: Mapping[str, Any]) -> bool:
        self.written.add((table, key))
        return self._records.insert(self._conn, table, key, value)

    def delete_record(self, table: str, key: str) -> bool:
        self.written.add((table, key))
        return self._records.delete(self._conn, table, key)

    def delete_records(self, table: str, keys: Sequence[str]) -> list[str]:
        gone = self._records.delete_many(self._conn, table, keys)
        self.written.update((table, key) for key in gone)
        return gone

    def replace_records(
        self,
        table: str,
        items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord | EncodedFields]],
    ) -> list[str]:
        self.written.update((table, key) for key, _, _ in items)
        return self._records.replace(self._conn, table, items)

    def add_tallies(self, tallies_: Sequence[Tally]) -> None:
        if tallies_:
            tallies.add(self._conn, self._records.table.rsplit(".", 1)[0], tallies_)
