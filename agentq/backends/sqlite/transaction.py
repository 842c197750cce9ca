"""The transaction object ``transact(fn)`` hands to ``fn``: send, ack, records and
the application's own SQL, all on the one connection of the running transaction.
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from agentq.backends.base import EncodedFields, EncodedRecord, Tally, Transaction
from agentq.backends.sqlite import records, tallies
from agentq.backends.sqlite.queues import QueueSQL
from agentq.clock import from_micros, to_micros
from agentq.errors import DuplicateKey, MessageNotFound, TransactionError

__all__ = ["SQLiteTransaction"]

# Seeded from os.urandom; only needs to be unpredictable enough. The lease
# sequence of a new message starts at a random 62-bit value, so a lease token can
# never match a later message that reuses a row id (the cheaper alternative to
# AUTOINCREMENT, which writes one more page per send). A forked child reseeds:
# it would otherwise draw its parent's next values.
_random = random.Random()
if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork
    os.register_at_fork(after_in_child=_random.seed)


class SQLiteTransaction(Transaction):
    """One read-write transaction. ``queue_sql(name, conn)`` looks a queue up."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        now: int,
        queue_sql: Callable[[str, sqlite3.Connection], QueueSQL],
    ) -> None:
        self._conn = conn
        self._now = now
        self._now_dt: datetime | None = None
        self._queue_sql = queue_sql
        self.doomed: TransactionError | None = None
        self.sent: set[str] = set()  # the queues this transaction sent to
        # The records it wrote, (table, key): their readers are woken after the commit.
        self.written: set[tuple[str, str]] = set()

    @property
    def now(self) -> datetime:
        # Read several times by every enqueue (id, stamps, delivery): made once.
        if self._now_dt is None:
            self._now_dt = from_micros(self._now)
        return self._now_dt

    def _doom(self, exc: TransactionError) -> TransactionError:
        # Like Spanner, a failed insert or ASSERT_ROWS_MODIFIED cannot be caught and
        # continued: the transaction will not commit whatever fn does next.
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
        data = spec.encode_payload(payload)
        when = self._now if deliver_time is None else to_micros(deliver_time)
        # A past delivery time is clamped to now, as Spanner does.
        when = max(when, self._now)
        try:
            self._conn.execute(sql.insert, (*parts, data, when, when, _random.getrandbits(62)))
        except sqlite3.IntegrityError as exc:
            if "FOREIGN KEY" in str(exc):
                raise self._doom(
                    TransactionError(
                        f"queue {queue!r}: no parent row in {spec.parent!r} for key {parts!r}"
                    )
                ) from exc
            raise self._doom(
                DuplicateKey(f"queue {queue!r} already has a message with key {parts!r}")
            ) from exc
        self.sent.add(queue)

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
        sql = self._queue_sql(queue, self._conn)
        parts = tuple(key)
        if len(parts) != len(sql.spec.key):
            return False  # no row of this queue has such a key
        # SQLite keeps whatever another program wrote (a text attempt number): the
        # values go in as given, and compare equal to themselves as stored.
        return bool(self._conn.execute(sql.delete_stored, parts).rowcount)

    def ack_all(self, queue: str, keys: Sequence[Sequence[Any] | Any]) -> None:
        sql = self._queue_sql(queue, self._conn)
        rows = [sql.spec.check_key(key) for key in keys]
        # A key names at most one message, so the rows deleted add up to the
        # keys given exactly when every message was there.
        deleted = self._conn.executemany(sql.delete, rows).rowcount if rows else 0
        if deleted != len(rows):
            raise self._doom(
                MessageNotFound(
                    f"queue {queue!r}: {len(rows) - deleted} of the {len(rows)} messages "
                    "to acknowledge have no message (already acknowledged)"
                )
            )

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, params).fetchall())

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        return records.get_record(self._conn, table, key)

    def get_records(
        self, table: str, keys: Sequence[str], *, likely_absent: bool = False
    ) -> dict[str, dict[str, Any]]:
        return records.get_records(self._conn, table, keys)

    def put_record(self, table: str, key: str, value: Mapping[str, Any] | EncodedRecord) -> None:
        records.put_record(self._conn, table, key, value)
        self.written.add((table, key))

    def update_records(self, table: str, items: Sequence[tuple[str, EncodedFields]]) -> list[str]:
        self.written.update((table, key) for key, _ in items)
        return records.update_records(self._conn, table, items)

    def insert_record(self, table: str, key: str, value: Mapping[str, Any]) -> bool:
        self.written.add((table, key))
        return records.insert_record(self._conn, table, key, value)

    def delete_record(self, table: str, key: str) -> bool:
        self.written.add((table, key))
        return records.delete_record(self._conn, table, key)

    def delete_records(self, table: str, keys: Sequence[str]) -> list[str]:
        # One statement each: SQLite runs them in process, a call costs microseconds.
        gone = [k for k in dict.fromkeys(keys) if records.delete_record(self._conn, table, k)]
        self.written.update((table, key) for key in gone)
        return gone

    def replace_records(
        self,
        table: str,
        items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord | EncodedFields]],
    ) -> list[str]:
        self.written.update((table, key) for key, _, _ in items)
        return records.replace_records(self._conn, table, items)

    def add_tallies(self, tallies_: Sequence[Tally]) -> None:
        if tallies_:
            tallies.add(self._conn, tallies_)
