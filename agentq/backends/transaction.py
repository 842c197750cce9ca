"""The :class:`Transaction` protocol: what the function given to
:meth:`Backend.transact <agentq.backends.base.Backend.transact>` may do in its
one read-write transaction (queue mutations, the runtime's records, the
application's own SQL, the tallies of finished tasks).

Part of the backend contract (:mod:`agentq.backends.base`, which re-exports it):
every backend's ``tx`` implements it and passes the same conformance suite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from agentq.backends.record_text import EncodedFields, EncodedRecord
from agentq.backends.tallies import Tally

__all__ = ["Transaction"]


class Transaction(Protocol):
    """A read-write transaction: queue mutations, records and application SQL."""

    @property
    def now(self) -> datetime:
        """The transaction's time (used as the default delivery time)."""
        ...

    def send(
        self,
        queue: str,
        key: Sequence[Any] | Any,
        payload: Any,
        deliver_time: datetime | None = None,
    ) -> None:
        """Insert a message; deliver at ``deliver_time`` (default: now)."""
        ...

    def ack(self, queue: str, key: Sequence[Any] | Any, must_exist: bool = True) -> bool:
        """Delete a message by key; returns whether it existed.

        With ``must_exist`` a missing message raises MessageNotFound and the
        whole transaction is rolled back, even if the caller catches it.
        """
        ...

    def ack_stored(self, queue: str, key: Sequence[Any]) -> bool:
        """Delete the message whose key columns hold exactly ``key``, as stored (as a
        received :class:`Message` carries it), without checking it against the
        queue's key types; returns whether one was deleted (a blind ack, Spanner's,
        says True). How a row written around agentq with a key of the wrong type
        leaves the queue: :meth:`ack` refuses such a key. Only SQLite, whose
        columns take any value, can hold one; elsewhere this is :meth:`ack`
        without ``must_exist``."""
        ...

    def ack_all(self, queue: str, keys: Sequence[Sequence[Any] | Any]) -> None:
        """Delete several messages of ``queue`` by key, each as :meth:`ack` with
        ``must_exist``: if any of them is missing, MessageNotFound rolls the whole
        transaction back (a committer's group of completions: one statement, not
        one per task, where the engine allows)."""
        ...

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run the application's own SQL in this transaction; returns rows."""
        ...

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        """Read a JSON record of the runtime's own state."""
        ...

    def get_records(
        self,
        table: str,
        keys: Sequence[str],
        *,
        likely_absent: bool = False,
        lock: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """Read several records in this transaction (what :meth:`get_record` gives
        for each key), as one read where the engine allows; keys with no record
        are left out.

        ``lock``: no other transaction may write these records until this one
        ends (PostgreSQL reads them ``FOR SHARE``: a writer at READ COMMITTED,
        which no serializable check sees, waits for this transaction or makes it
        fail; the others' transactions are serializable, and their reads already
        do). For a read whose answer this transaction's writes rest on, where the
        record's writer may be a fenced transaction (a worker's completion).

        ``likely_absent``: the caller expects almost never to find one (the tasks
        waiting on a finishing task). A backend may then answer that none exists
        without reading, and check it with the transaction's next round trip; if
        one does exist, nothing of the transaction commits and the function runs
        again, reading these keys. (PostgreSQL does so; the others read.)"""
        ...

    def put_record(self, table: str, key: str, value: Mapping[str, Any] | EncodedRecord) -> None:
        """Insert or replace a JSON record (a mapping, or one encoded beforehand)."""
        ...

    def update_records(self, table: str, items: Sequence[tuple[str, EncodedFields]]) -> list[str]:
        """Set top-level fields of existing records, the other fields left as they
        are, as one set; returns the keys that have no record (nothing written)."""
        ...

    def insert_record(self, table: str, key: str, value: Mapping[str, Any]) -> bool:
        """Insert a record unless the key exists; returns whether it was inserted."""
        ...

    def delete_record(self, table: str, key: str) -> bool:
        """Delete a record; returns whether it existed."""
        ...

    def delete_records(self, table: str, keys: Sequence[str]) -> list[str]:
        """Delete several records, each as :meth:`delete_record`; returns the keys
        that existed, in the order given, each once (a pruner's batch: one
        statement, not one per record, where the engine allows)."""
        ...

    def replace_records(
        self,
        table: str,
        items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord | EncodedFields]],
    ) -> list[str]:
        """Compare-and-swap: for each ``(key, version, value)``, replace the record
        if it is still at ``version`` (from :meth:`Backend.read_records`); a value
        of :class:`EncodedFields` sets only those fields of the record.

        Returns the keys that were not at their version (written or deleted since
        the read); those records are left as they are and the transaction goes on.
        """
        ...

    def add_tallies(self, tallies: Sequence[Tally]) -> None:
        """Add finished tasks to the per-minute tallies (:class:`Tally`), with
        this transaction: a completion group's, once. Concurrent transactions
        adding to the same minute neither wait on nor fail each other
        (:mod:`agentq.backends.tallies`); ValueError for a tally of another
        outcome or a count below 1."""
        ...
