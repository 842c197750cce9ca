"""The runtime's records (ledger, approvals, ...) in one ``records`` table of
agentq's schema.

A record is a JSON object stored as text under ``(tbl, k)``; its version, for
compare-and-swap, is the stored text itself (no other writer can make an equal
text mean something else). Setting fields (:class:`EncodedFields`) merges them
here, into the stored text read under the row's lock (or, for a swap, into the
version text itself), and writes the whole record: not in the server as
``jsonb``, which cannot hold a NUL character (a tool argument may) and would
reorder the record's fields. Keys are compared byte-wise (``COLLATE "C"``), so key order and
prefix ranges are the same as on the other backends.

A key PostgreSQL cannot store as text (not valid UTF-8, or holding a NUL
character) names no record: reads find nothing, writes are refused as
:class:`~agentq.errors.InvalidMessage`. Those checks, the merging of fields and
the rows of a compare-and-swap are :mod:`.record_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from agentq.backends.base import EncodedFields, EncodedRecord, RecordFilter, StoredRecord
from agentq.backends.owners import record_owner
from agentq.backends.postgres.checks import Guesses, SpeculationFailed, count_check, is_failure_of
from agentq.backends.postgres.connection import Conn, Database
from agentq.backends.postgres.pipeline import TxConn, run_or_defer
from agentq.backends.postgres.prepared import prepared
from agentq.backends.postgres.record_rows import (
    SwapRow,
    check_storable,
    merged,
    record_table,
    storable,
    stored_text,
    swap_rows,
    swap_statement,
)
from agentq.backends.record_filters import record_rare_status
from agentq.backends.record_pages import PageDialect, filtered_page
from agentq.backends.tool_column import record_tool
from agentq.errors import AgentQError
from agentq.jsontext import decode

__all__ = ["Records"]


class Records:
    """The records table of one schema: the writes run on a transaction's
    connection, the reads on their own pooled one."""

    def __init__(self, table: str) -> None:
        self.table = table  # already qualified
        #: The texts of the records this process swapped in, and the records
        #: found where none was expected (see :mod:`.checks`).
        self.guesses = Guesses()

    # -- inside a transaction ------------------------------------------------

    def get(self, conn: Conn, table: str, key: str) -> dict[str, Any] | None:
        if not storable(key):
            return None
        row = conn.execute(
            f"SELECT v FROM {self.table} WHERE tbl = %s AND k = %s", (table, key)
        ).fetchone()
        return None if row is None else dict(decode(row[0]))

    def get_many(
        self,
        conn: Conn,
        table: str,
        keys: Sequence[str],
        *,
        likely_absent: bool = False,
        lock: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """The records of ``keys``. ``likely_absent``: in a transaction of the
        backend's own, guess that none exists and check it with the next round
        trip (a failed guess: :class:`SpeculationFailed`, and these keys are read
        when the function runs again). ``lock``: read ``FOR SHARE``, in key order
        (two such reads never wait on each other in a cycle)."""
        wanted = [key for key in dict.fromkeys(keys) if storable(key)]
        if not wanted:
            return {}
        if lock:
            rows = conn.execute(
                f"SELECT k, v FROM {self.table} WHERE tbl = %s AND k = ANY (%b::text[]) "
                "ORDER BY k FOR SHARE",
                (table, wanted),
            ).fetchall()
            self.guesses.read(table, wanted)
            return {k: dict(decode(v)) for k, v in rows}
        if likely_absent and isinstance(conn, TxConn) and self.guesses.may_be_absent(table, wanted):
            # One key (an idempotency key) as a plain value: the check then goes
            # in the commit's one text of statements (.inline), not bound apart.
            one = len(wanted) == 1
            query, params, token = count_check(
                f"SELECT 1 FROM {self.table} WHERE tbl = %s AND k = "
                + ("%s" if one else "ANY (%b::text[])"),
                (table, wanted[0] if one else wanted), 0, f"no record of {table!r} was expected",
            )  # fmt: skip

            def translate(exc: psycopg.Error) -> AgentQError | None:
                if not is_failure_of(exc, token):
                    return None
                self.guesses.present(table, wanted)
                return SpeculationFailed(f"a record of {table!r} exists after all: read again")

            conn.defer(query, params, translate)
            return {}
        found = {k: dict(decode(v)) for k, v in self._select(conn, table, wanted)}
        # Only the keys found absent may be guessed absent again: one found stays
        # read (another thread's guess of it would fail, and fail again).
        self.guesses.read(table, [key for key in wanted if key not in found])
        return found

    def put(
        self, conn: Conn, table: str, key: str, value: Mapping[str, Any] | EncodedRecord
    ) -> None:
        check_storable(record_table(table), key)
        run_or_defer(  # nothing to read back: sent with the transaction's next round trip
            conn,
            # The owner and the tool are written by the insert only: they never
            # change (HOT updates).
            prepared(
                f"INSERT INTO {self.table} (tbl, k, v, rare_status, owner, tool) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tbl, k) "
                "DO UPDATE SET v = excluded.v, rare_status = excluded.rare_status"
            ),
            (table, key, stored_text(value), record_rare_status(table, value),
             record_owner(table, value), record_tool(table, value)),
        )

    def insert(self, conn: Conn, table: str, key: str, value: Mapping[str, Any]) -> bool:
        check_storable(record_table(table), key)
        cur = conn.execute(
            f"INSERT INTO {self.table} (tbl, k, v, rare_status, owner, tool) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tbl, k) DO NOTHING",
            (table, key, stored_text(value), record_rare_status(table, value),
             record_owner(table, value), record_tool(table, value)),
        )
        return cur.rowcount > 0

    def delete(self, conn: Conn, table: str, key: str) -> bool:
        if not storable(key):
            return False
        cur = conn.execute(f"DELETE FROM {self.table} WHERE tbl = %s AND k = %s", (table, key))
        return cur.rowcount > 0

    def delete_many(self, conn: Conn, table: str, keys: Sequence[str]) -> list[str]:
        """Delete the records of ``keys`` in one statement; the keys that existed,
        in the order given, each once."""
        wanted = [key for key in dict.fromkeys(keys) if storable(key)]
        if not wanted:
            return []
        gone = {
            r[0]
            for r in conn.execute(
                f"DELETE FROM {self.table} WHERE tbl = %s AND k = ANY (%b::text[]) RETURNING k",
                (table, wanted),
            ).fetchall()
        }
        return [key for key in wanted if key in gone]

    def replace(
        self,
        conn: Conn,
        table: str,
        items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord | EncodedFields]],
    ) -> list[str]:
        """Compare-and-swap each ``(key, version, value)``; return the keys whose
        stored version differed (nothing written for them). At READ COMMITTED the
        ``UPDATE`` re-checks ``v = version`` on the newest row after waiting for
        a concurrent writer, so two swaps from one version never both win. The
        whole set is one statement (a key given twice: one at a time, in order).

        Where every key is at the text this process swapped in last (a plain
        success swapped in whole from its claim's text) the swap is checked in
        SQL with the next round trip instead of read (:meth:`_swap_as_guessed`)."""
        changed, rows = swap_rows(table, items)
        if len({row[0] for row in rows}) < len(rows):
            sql = (f"UPDATE {self.table} SET v = %s, rare_status = %s "
                   "WHERE tbl = %s AND k = %s AND v = %s")  # fmt: skip
            for key, version, text, rare in rows:
                if conn.execute(sql, (text, rare, table, key, version)).rowcount == 0:
                    changed.append(key)
            return changed
        if isinstance(conn, TxConn) and not changed and self._swap_as_guessed(conn, table, rows):
            return []
        if rows:
            swapped = {r[0] for r in conn.execute(*self._swap_sql(table, rows)).fetchall()}
            changed.extend(self._swapped(table, rows, swapped))
        return changed

    def swap_at_commit(
        self,
        tx: TxConn,
        table: str,
        items: Sequence[tuple[str, str, EncodedFields | EncodedRecord]],
    ) -> Callable[[], list[str]]:
        """:meth:`replace` of ``items`` (each key once), sent with the ``COMMIT``
        of ``tx``: returns what gives the keys that changed, once committed."""
        changed, rows = swap_rows(table, items)
        if not rows:
            return lambda: changed
        result = tx.before_commit(*self._swap_sql(table, rows))

        def settled() -> list[str]:
            swapped = {r[0] for r in result.fetchall()}
            return changed + self._swapped(table, rows, swapped)

        return settled

    def _swap_sql(self, table: str, rows: list[SwapRow]) -> tuple[str, Any]:
        query, params = swap_statement(self.table, table, rows, "r.k")
        return prepared(query), params

    def _swapped(self, table: str, rows: list[SwapRow], swapped: set[str]) -> list[str]:
        """Remember the texts swapped in (a completion writes from them, no
        re-read); returns the keys that were not."""
        self.guesses.wrote(table, {row[0]: row[2] for row in rows if row[0] in swapped})
        return [row[0] for row in rows if row[0] not in swapped]

    def update(
        self, conn: Conn, table: str, items: Sequence[tuple[str, EncodedFields]]
    ) -> list[str]:
        """Set top-level fields of existing records; returns the keys with no record.

        Where this process swapped every one of them in last (a worker's claims)
        the fields are merged into those texts with no read, and the write is a
        compare-and-swap checked with the next round trip: a record changed since
        fails the transaction (:class:`SpeculationFailed`), which then runs again
        and reads them, locked, as any other."""
        record_table(table)
        if isinstance(conn, TxConn) and self._update_as_guessed(conn, table, items):
            return []
        wanted = [key for key, _ in items if storable(key)]
        # Locked as read: no other transaction writes them until this one ends.
        stored: dict[str, str] = dict(
            conn.execute(
                f"SELECT k, v FROM {self.table} WHERE tbl = %s AND k = ANY (%b::text[]) FOR UPDATE",
                (table, wanted),
            ).fetchall()
        )
        missing: list[str] = []
        written: dict[str, str] = {}
        rares: dict[str, str | None] = {}
        for key, fields in items:
            text = stored.get(key)
            if text is None:
                missing.append(key)
                continue
            text, rares[key] = merged(table, text, fields)
            stored[key] = written[key] = text  # a key given twice: the second sees the first
        if written:
            conn.execute(
                f"UPDATE {self.table} AS r SET v = x.v, rare_status = x.rare "
                "FROM unnest(%b::text[], %b::text[], %b::text[]) AS x(k, v, rare) "
                "WHERE r.tbl = %s AND r.k = x.k",
                (list(written), list(written.values()), [rares[k] for k in written], table),
            )
        return missing

    def _update_as_guessed(
        self, conn: TxConn, table: str, items: Sequence[tuple[str, EncodedFields]]
    ) -> bool:
        """The write of :meth:`update` from the texts this process swapped in, if
        it knows them all (each key once); False to read them instead."""
        keys = [key for key, _ in items]
        if not keys or len(set(keys)) < len(keys):
            return False
        olds = self.guesses.take_texts(table, keys)
        if olds is None:
            return False
        rows: list[SwapRow] = []
        for key, fields in items:
            text, rare = merged(table, olds[key], fields)
            rows.append((key, olds[key], text, rare))
        self._defer_checked_swap(conn, table, rows)
        return True

    def _swap_as_guessed(self, conn: TxConn, table: str, rows: list[SwapRow]) -> bool:
        """The swap of :meth:`replace` checked in SQL with the next round trip
        (its result not read), if every key is at the text this process last
        swapped in (a worker's claim: its completion swaps from it); False to
        swap and read which keys changed instead. A record changed since fails
        the transaction (:class:`SpeculationFailed`), which then runs again
        without the guess (the caller merges its fields into what is stored)."""
        keys = [row[0] for row in rows]
        if not keys:
            return False
        olds = self.guesses.take_texts(table, keys)
        if olds is None or any(olds[key] != version for key, version, _, _ in rows):
            return False
        self._defer_checked_swap(conn, table, rows)
        return True

    def _defer_checked_swap(self, conn: TxConn, table: str, rows: list[SwapRow]) -> None:
        """Compare-and-swap ``rows`` (each key once) with the transaction's next
        round trip; any not at its version fails the transaction with
        :class:`SpeculationFailed` (nothing of it commits)."""
        query, params, token = count_check(
            *swap_statement(self.table, table, rows, "1"), len(rows),
            f"records of {table!r} as claimed",
        )

        def translate(exc: psycopg.Error) -> AgentQError | None:
            if not is_failure_of(exc, token):
                return None
            return SpeculationFailed(f"a record of {table!r} changed since its claim: read it")

        conn.defer(query, params, translate)

    def _select(self, conn: Conn, table: str, keys: Sequence[str]) -> list[tuple[str, str]]:
        wanted = [key for key in dict.fromkeys(keys) if storable(key)]
        if not wanted:
            return []
        rows = conn.execute(
            f"SELECT k, v FROM {self.table} WHERE tbl = %s AND k = ANY (%b::text[])",
            (table, wanted),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    # -- outside a transaction -----------------------------------------------

    def read_versions(
        self, db: Database, table: str, keys: Sequence[str]
    ) -> dict[str, StoredRecord]:
        rows = db.read(lambda conn: self._select(conn, table, keys), f"reading {table!r}")
        return {k: self.stored(v) for k, v in rows}

    @staticmethod
    def stored(text: str) -> StoredRecord:
        """A record read as ``text`` (decoded here, once), its version that text."""
        return StoredRecord(value=dict(decode(text)), version=text)

    def read_texts(self, db: Database, table: str, keys: Sequence[str]) -> dict[str, str]:
        """The versions (stored texts, not decoded) of the records of ``keys``."""
        rows = db.read(lambda conn: self._select(conn, table, keys), f"reading {table!r}")
        return dict(rows)

    def read_one(self, db: Database, table: str, key: str) -> dict[str, Any] | None:
        return db.read(lambda conn: self.get(conn, table, key), f"reading {table!r}")

    @property
    def dialect(self) -> PageDialect:
        """How a page of records is written here (:mod:`agentq.backends.record_pages`):
        a field read from the text parsed as json (not jsonb, which refuses a
        \\u0000 that a tool's argument may hold)."""
        return PageDialect(
            records=self.table, mark="%s", field=lambda name: f"(v::json ->> '{name}')",
            false="false", owners=True, tools=True,
        )  # fmt: skip

    def list(
        self,
        db: Database,
        table: str,
        prefix: str = "",
        limit: int | None = None,
        after: str = "",
        *,
        descending: bool = False,
        where: RecordFilter | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        if not storable(prefix) or not storable(after):
            return []  # no stored key starts with it (or: a cursor no key came from)
        if limit is not None and limit <= 0:
            return []
        sql, params = filtered_page(self.dialect, record_table(table), prefix, after,
                                    descending=descending, where=where, limit=limit)  # fmt: skip
        rows = db.read(lambda conn: conn.execute(sql, params).fetchall(), f"listing {table!r}")
        return [(k, dict(decode(v))) for k, v in rows]
