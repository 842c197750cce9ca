"""The queue backend contract: Spanner queues, as a Python protocol.

One :class:`Backend` protocol of semantic queue operations; every backend
(``sqlite``, ``spanner``) implements it and passes the same conformance suite in
``tests/conformance``. A backend knows nothing about tools, agents or policies.

Semantics (mirroring Spanner queues):

* ``transact(fn)`` runs ``fn(tx)`` in one read-write transaction and retries the
  whole function on transient aborts, so ``fn`` must not have outside effects.
* ``tx.send`` inserts a message; an existing key fails the transaction.
* ``tx.ack(must_exist=True)`` deletes by key; deleting nothing fails the whole
  transaction (the stale worker's results are not committed). ``tx.ack_stored``
  deletes by a key as stored, unchecked (a row written around agentq).
* ``stream`` yields batches of ready messages, each leased for the backend's
  :attr:`Backend.lease_seconds` (:data:`LEASE_SECONDS`, 10 s, unless a SQLite
  or PostgreSQL URL says ``lease_seconds=``); ``renew`` extends leases by the
  same amount.
* A message whose lease expires without ack is redelivered after a backoff
  (:class:`RedeliveryPolicy`).

What ``fn(tx)`` may do is the :class:`Transaction` protocol, in
:mod:`agentq.backends.transaction` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agentq.backends.notify import RecordTopic, Wake
from agentq.backends.queue_values import (
    LEASE_SECONDS,
    BacklogGroup,
    Message,
    QueueStats,
    RedeliveryPolicy,
    Renewal,
)
from agentq.backends.record_filters import (
    COMMON_TASK_STATUSES,
    COUNTED_TABLES,
    OPEN_APPROVAL_STATUSES,
    RecordFilter,
)
from agentq.backends.record_text import (
    EncodedFields,
    EncodedRecord,
    encode_fields,
    encode_record,
)
from agentq.backends.tallies import Tally
from agentq.backends.transaction import Transaction
from agentq.clock import Clock
from agentq.spec import QueueSpec

__all__ = [
    "COMMON_TASK_STATUSES",
    "COUNTED_TABLES",
    "LEASE_SECONDS",
    "OPEN_APPROVAL_STATUSES",
    "Backend",
    "BacklogGroup",
    "EncodedFields",
    "EncodedRecord",
    "LeaseClaim",
    "Message",
    "QueueStats",
    "RecordFilter",
    "RedeliveryPolicy",
    "Renewal",
    "StoredRecord",
    "Tally",
    "Transaction",
    "Wake",
    "encode_fields",
    "encode_record",
]

T = TypeVar("T")

def check_stream_args(max_batch_size: int, max_duration: float) -> None:
    """The argument checks every backend's :meth:`Backend.stream` makes."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
    if max_duration < 0:
        raise ValueError(f"max_duration must not be negative, got {max_duration}")



@dataclass(frozen=True)
class StoredRecord:
    """A record as read outside a transaction, with an opaque version: a record
    still at the same version has not been written since."""

    value: dict[str, Any]
    version: str


class LeaseClaim(Protocol):
    """What a worker writes with a lease, on a backend that can
    (``claims_with_leases``, PostgreSQL: ``stream(..., claim=...)``): the lease's
    transaction reads each message's record of :attr:`table` (its key: the
    message's first key part) with the ready rows, asks :meth:`prepare` which of
    them to swap (compare-and-swap, as :meth:`Transaction.replace_records`), and
    sends those swaps with its COMMIT; :meth:`settled` then hears which of them
    were not at their version (their messages are leased all the same)."""

    table: str

    def ready(self) -> None:
        """Called before each lease, outside any transaction: the claim may read
        what it needs through the backend (nothing can be read in :meth:`prepare`)."""
        ...

    def prepare(
        self, messages: Sequence[Message], records: Mapping[str, StoredRecord]
    ) -> Sequence[tuple[str, str, EncodedFields | EncodedRecord]]:
        """The swaps ``(key, version, value)`` to make with the lease (each key
        once; ``value``: the claim's changed fields, or the whole claimed record);
        it must not raise, nor use the backend (its transaction is open)."""
        ...

    def settled(self, changed: Sequence[str]) -> None:
        """The lease committed; ``changed``: the swapped keys that were not at their
        version (nothing written for them)."""
        ...


class Backend(Protocol):
    """A database with Spanner-queue semantics."""

    clock: Clock
    redelivery: RedeliveryPolicy
    #: How long a lease lasts, on receive and on renew (seconds): Spanner's fixed
    #: :data:`LEASE_SECONDS`; SQLite and PostgreSQL take ``lease_seconds=``.
    lease_seconds: float
    #: Whether keys that grow with time are cheap here (B-tree locality: SQLite)
    #: rather than a write hotspot (key-range splits: Spanner).
    ordered_keys: bool
    #: Whether writes are serialised, one transaction at a time (SQLite).
    single_writer: bool
    #: Whether a worker should prepare its claims from one read outside the
    #: transaction and swap them in as a set, and write only a success's changed
    #: fields. It pays where writes are serialised (SQLite: the write lock is held
    #: for the swap alone) and where a set of swaps is one statement (PostgreSQL:
    #: a batch's claim takes a few round trips instead of two per task); where
    #: each swap costs a round trip of its own (Spanner) it only adds reads.
    swaps_in_sets: bool
    #: ``None`` when :meth:`subscribe_commits` also sees other processes' commits;
    #: otherwise how often (seconds) a waiting reader must re-read instead.
    commit_poll_interval: float | None

    @property
    def url(self) -> str:
        """The URL this backend was opened with (credentials removed)."""
        ...

    def create_queue(self, spec: QueueSpec) -> None:
        """Create the queue if absent; an existing queue with another spec is an error."""
        ...

    def queue_spec(self, name: str) -> QueueSpec:
        """The spec of an existing queue (QueueNotFound otherwise)."""
        ...

    def queues(self) -> list[str]:
        """Names of all queues."""
        ...

    def transact(
        self, fn: Callable[[Transaction], T], *, durable: bool = True, fenced: bool = False
    ) -> T:
        """Run ``fn(tx)`` in one read-write transaction, retried on transient aborts.

        ``durable=False`` allows a backend to skip forcing this commit to disk
        (still atomic, and durable across a process crash): for bookkeeping whose
        loss on power failure only causes an earlier redelivery.

        ``fenced=True`` says that no write of ``fn`` rests on a read that another
        transaction could change before the commit, other than through the write
        itself: each is a strict ack (a delete that must find its row), an insert
        that must not find one, a compare-and-swap (:meth:`Transaction.replace_records`),
        a write of a row only this process writes, or an unconditional last-writer-wins
        put. A backend may then run it without serializable checks (READ COMMITTED
        on PostgreSQL, where those writes lock their rows and re-check them), so
        that the bookkeeping of a worker never aborts an application's own
        SERIALIZABLE transaction. SQLite and Spanner run every transaction as they
        always do.
        """
        ...

    def stream(
        self, queue: str, max_batch_size: int = 1, max_duration: float = 0.0
    ) -> Iterator[list[Message]]:
        """Yield batches of leased ready messages for up to ``max_duration`` seconds.

        With ``max_duration=0`` it tries once and stops. The last message of
        each batch has ``last_in_batch`` set.
        """
        ...

    def renew(self, queue: str, tokens: Sequence[str]) -> list[Renewal]:
        """Extend leases; see :class:`Renewal` for the rows returned."""
        ...

    def stats(self, queue: str) -> QueueStats:
        """Depth, ready, scheduled, leased and oldest age of a queue."""
        ...

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        """Read one record outside a transaction (strong read)."""
        ...

    def list_records(
        self,
        table: str,
        prefix: str = "",
        limit: int | None = None,
        after: str = "",
        *,
        descending: bool = False,
        where: RecordFilter | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """Records of a table whose key starts with ``prefix``, in key order
        (``descending``: from the highest key down); with ``after``, only keys
        past it in that order (pass a page's last key for the next page).

        ``where`` keeps only records whose top-level string fields hold one of
        the values given for them (``None`` among the values: the field is
        missing or null), checked in the query: ``limit`` counts the records
        that match, and the ones that do not are never sent back. Tasks
        filtered on rare statuses only (:func:`rare_statuses`) are read
        through an index of those statuses where the backend keeps one (SQLite,
        PostgreSQL): the query reads the records that match, not the others."""
        ...

    def record_count(self, table: str, *, owner: str | None = None) -> int:
        """How many records ``table`` holds, for the tables of
        :data:`COUNTED_TABLES` (ValueError for another); with ``owner``, only
        those whose owner column holds it (:mod:`agentq.backends.owners`: tasks
        by ``created_by``; 0 for another table). SQLite and PostgreSQL keep the
        counts in the transaction of each insert and delete (a record's updates
        cost nothing), so reading one costs a row, not the records; Spanner
        counts in the query (the owner's through the owner index)."""
        ...

    def read_tallies(
        self, first_minute: int, end_minute: int, *, width: int = 1, owner: str | None = None
    ) -> list[Tally]:
        """The tallies of the minutes from ``first_minute`` up to ``end_minute``
        (excluded), summed per slot of ``width`` minutes (a row's minute: its
        slot's first), outcome and bucket; with ``owner``, only that owner's
        tasks, else everyone's (owner ``""``). Sorted by slot, outcome, bucket.
        What it reads grows with the minutes, not with the tasks they count."""
        ...

    def delete_tallies(self, before_minute: int) -> int:
        """Delete the tallies of the minutes before ``before_minute`` (a prune);
        returns how many rows went (a count of stored rows, not of tasks)."""
        ...

    def compact_tallies(self, before_minute: int) -> int:
        """Merge the stored tallies of the minutes before ``before_minute`` into
        one row per minute, owner, outcome and bucket, where a backend stores
        more (PostgreSQL folds the changes its completions append; Spanner merges
        its one record per transaction into one per minute; SQLite keeps one
        already). :meth:`read_tallies` answers the same before and after; what
        it reads then grows with the minutes, not with the transactions.
        Concurrent completions lose nothing. Returns how many stored rows
        went (merged into others)."""
        ...

    def message_keys(self, queue: str, *, delivered: bool = False) -> list[tuple[Any, ...]]:
        """The keys of every message in ``queue`` (ready, scheduled or leased), in
        no particular order. The queue holds only unfinished work: reading its
        keys costs the messages, not the ledger.

        With ``delivered``, the keys of the messages leased at least once (their
        lease may have expired since): a task can be running only once its
        message was. SQLite and PostgreSQL find them without returning the
        others; Spanner keeps its leases to itself and returns every key."""
        ...

    def message_count(self, queue: str, at_most: int, *, delivered: bool = False) -> int:
        """How many messages ``queue`` holds (ready, scheduled or leased), up to
        ``at_most``: a listing's check that a backlog is too large to read by
        key, without reading the keys. Its cost does not grow with a backlog
        past ``at_most`` (PostgreSQL and Spanner count no further; SQLite
        counts its B-tree's pages, not its rows). With ``delivered``, the
        messages :meth:`message_keys` would return with it (SQLite and
        PostgreSQL then step through the queue's rows to find them)."""
        ...

    def undelivered_backlog(
        self, queue: str, *, owner: str | None = None, oldest: bool = True
    ) -> list[BacklogGroup]:
        """The tasks whose messages in the task queue ``queue`` (keyed by task id
        first, as the runtime keys its tasks' messages) no worker has leased yet
        and whose records are in no rare status, counted by tool in the
        database, with the oldest one's ``created_at``: in a backlog such a task
        is queued (it runs only once its message was leased), so an overview
        counts it without reading its record. With ``owner``, only the tasks it
        created (the owner column). Without ``oldest``, the counts alone
        (``oldest_created_at`` None): no record's JSON is read. A message whose
        task has no record is left out. Spanner keeps its leases to itself
        (every message counts as delivered, :meth:`message_keys`) and returns
        no group."""
        ...

    def read_records(self, table: str, keys: Sequence[str]) -> dict[str, StoredRecord]:
        """Read many records outside a transaction (strong read), with versions
        for :meth:`Transaction.replace_records`; missing keys are left out."""
        ...

    def reclaim_space(self, max_bytes: int, *, keep_free: float = 0.0) -> int:
        """Give up to ``max_bytes`` of the space that deleted rows left free back to
        the file system, in one short write transaction, keeping free space of
        ``keep_free`` times the database's size for later writes to reuse; returns
        the bytes given back. Free space is reused by later writes either way; a
        database that manages its own storage (Spanner) returns 0."""
        ...

    def subscribe_commits(self, wake: Wake, record: RecordTopic | None = None) -> None:
        """Call ``wake.set()`` after every commit that may have changed a record:
        this process's, and other processes' unless :attr:`commit_poll_interval`
        is set. With ``record`` (:func:`~agentq.backends.notify.record_topic`),
        only after those that may have changed that record: this process's
        commits that wrote it, and other processes' commits after which it is
        found changed (a spurious wake-up is allowed, a missed one is not).
        Subscribe before reading, so no commit after the read is missed."""
        ...

    def unsubscribe_commits(self, wake: Wake) -> None:
        """Stop waking ``wake`` (each subscribe is undone by one unsubscribe)."""
        ...

    def close(self) -> None:
        """Release connections; never blocks for long."""
        ...
