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
* ``stream`` yields batches of ready messages, each leased for
  :data:`LEASE_SECONDS`; ``renew`` extends leases by the same amount.
* A message whose lease expires without ack is redelivered after a backoff
  (:class:`RedeliveryPolicy`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

import orjson

from agentq.backends.notify import RecordTopic, Wake
from agentq.backends.tallies import Tally
from agentq.clock import Clock
from agentq.spec import Key, QueueSpec

__all__ = [
    "COMMON_TASK_STATUSES",
    "COUNTED_TABLES",
    "LEASE_SECONDS",
    "OPEN_APPROVAL_STATUSES",
    "Backend",
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

#: :meth:`Backend.list_records`' filter: field name → the values it may hold
#: (strings; ``None``: missing or null). Field names are identifiers.
RecordFilter = Mapping[str, Collection[str | None]]

#: The statuses every task passes through (enqueued, claimed, done). The tasks'
#: status index holds the others (rare: dead, cancelled, awaiting approval,
#: waiting, a retry scheduled, an outcome unknown), so that a worker's status
#: changes never touch an index (on PostgreSQL they stay HOT updates), while a
#: listing of tasks filtered on rare statuses only (:func:`rare_statuses`)
#: reads the records it returns, not the finished ones in between.
COMMON_TASK_STATUSES = ("queued", "running", "succeeded")
#: The approvals' open statuses, which the same index holds for the approvals
#: table (the inbox: pending among many decided).
OPEN_APPROVAL_STATUSES = ("escalated", "pending")
#: The record tables whose records :meth:`Backend.record_count` counts.
COUNTED_TABLES = ("dead_letters", "tasks")

#: Lease length on receive and on renew; fixed, as in Spanner.
LEASE_SECONDS = 10.0


@dataclass(frozen=True)
class Message:
    """One leased message, as RECEIVE returns it."""

    queue: str
    key: Key
    payload: Any
    deliver_time: datetime
    lease_token: str
    lease_expiry: datetime
    last_in_batch: bool


@dataclass(frozen=True)
class Renewal:
    """One row of RENEWLEASE: ``new_token`` is None when the message was already
    acknowledged but the old token had not expired yet."""

    old_token: str
    new_token: str | None
    lease_expiry: datetime


@dataclass(frozen=True)
class QueueStats:
    """A queue's depth and health, named after Spanner's queue metrics.

    ``None`` means the backend cannot tell from SQL (Spanner reports leases,
    expirations and TTL drops as Cloud Monitoring metrics).
    """

    queue: str
    depth: int
    ready: int
    scheduled: int
    leased: int | None
    backing_off: int | None
    oldest_unacked_age: float | None
    lease_expirations: int | None
    ttl_dropped: int | None

    def _repr_html_(self) -> str:
        from agentq.notebook.html import queue_stats_html

        return queue_stats_html([self])


@dataclass(frozen=True)
class RedeliveryPolicy:
    """When a message whose lease expired becomes ready again.

    During the first ``exponential_phase`` after its delivery time, the n-th
    expiry waits ``initial * multiplier ** (n - 1)`` seconds (capped at
    ``max_delay``); after that, every redelivery waits ``later_delay``. The
    defaults follow Spanner's documented behaviour: exponential backoff during a
    message's first hour, then hourly.
    """

    initial: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 600.0
    exponential_phase: timedelta = timedelta(hours=1)
    later_delay: float = 3600.0

    def delay(self, expirations: int, age: float) -> float:
        """Seconds between the ``expirations``-th lease expiry and redelivery."""
        if age >= self.exponential_phase.total_seconds():
            return self.later_delay
        exponent = min(max(expirations - 1, 0), 64)
        return float(min(self.initial * self.multiplier**exponent, self.max_delay))


#: :attr:`EncodedRecord.status` of a text whose status its maker did not say.
_UNSAID: Any = object()


class EncodedRecord(str):
    """A record already encoded by :func:`encode_record`: a transaction stores it
    as it is, so the encoding can happen before the transaction, off the write
    lock that every other writer waits for.

    ``status`` is the record's top-level ``"status"`` as its text holds it (a
    string, or None for none or one of no other JSON type) when the encoder knew
    it: :func:`record_rare_status` then reads it there instead of parsing the
    whole record again (every enqueue, every whole-record claim or completion).
    Text made another way (``EncodedRecord(text)``) does not say, and is parsed.
    """

    status: Any = _UNSAID
    #: The record's ``"created_by"``, told as ``status`` is (:mod:`.owners`).
    owner: Any = _UNSAID

    def extended(self, members: str) -> EncodedRecord:
        """This record's text with ``members`` (``,"name":value`` pairs, not
        ``status``) added at its end; it says the same status."""
        out = EncodedRecord(f"{self[:-1]}{members}}}")
        out.status, out.owner = self.status, self.owner
        return out


_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def prefix_end(prefix: str) -> str | None:
    """The smallest key above every key starting with ``prefix`` (None: no upper
    bound), in code-point order (SQLite's and PostgreSQL's ``COLLATE "C"`` text,
    Spanner's UTF-8 bytes): the prefix's last character plus one, skipping the
    surrogates no encoding stores. A last character of U+10FFFF has no successor:
    the bound is then the one of the prefix without it (nothing sorts between)."""
    prefix = prefix.rstrip("\U0010ffff")
    if not prefix:
        return None
    nxt = ord(prefix[-1]) + 1
    if 0xD800 <= nxt <= 0xDFFF:
        nxt = 0xE000
    return prefix[:-1] + chr(nxt)


def check_record_filter(where: RecordFilter | None) -> list[tuple[str, list[str], bool]]:
    """``where`` as ``(field, string values, whether missing/null matches)``, in a
    fixed order; a field name that is not an identifier (it is spliced into a JSON
    path) or a value that is not a string raises ValueError."""
    out = []
    for name in sorted(where or {}):
        if not _FIELD.match(name):
            raise ValueError(f"record field name {name!r} is not an identifier")
        values = list((where or {})[name])
        strings = sorted({v for v in values if v is not None})
        if any(not isinstance(v, str) for v in strings):
            raise ValueError(f"values of record field {name!r} must be strings or None")
        out.append((name, strings, None in values))
    return out


def rare_statuses(table: str, where: RecordFilter | None) -> list[str] | None:
    """The statuses a listing of ``table`` filtered by ``where`` walks the tasks'
    index of rare statuses for (sorted), or None if it walks the primary key:
    only tasks filtered on statuses that are all rare (none of
    :data:`COMMON_TASK_STATUSES`, and not a missing status) use the index."""
    if table not in ("tasks", "approvals") or not where or "status" not in where:
        return None
    wanted = list(where["status"])
    if any(rare_status(table, v) is None for v in wanted):
        return None
    return sorted(set(wanted))  # type: ignore[arg-type]


def rare_status(table: str, status: Any) -> str | None:
    """What a record of ``table`` with ``status`` keeps in its rare-status
    column: the status of a task whose status is a string and not one of
    :data:`COMMON_TASK_STATUSES`, or of an approval in one of
    :data:`OPEN_APPROVAL_STATUSES`; else None (not in the index)."""
    if not isinstance(status, str):
        return None
    if table == "tasks":
        return None if status in COMMON_TASK_STATUSES else status
    if table == "approvals":
        return status if status in OPEN_APPROVAL_STATUSES else None
    return None


def record_rare_status(table: str, value: Mapping[str, Any] | str) -> str | None:
    """:func:`rare_status` of a whole record (a mapping, or its stored text, which
    is parsed only for a task)."""
    if table not in ("tasks", "approvals"):
        return None
    if isinstance(value, EncodedRecord) and value.status is not _UNSAID:
        return rare_status(table, value.status)
    if not isinstance(value, Mapping):
        value = _loads(value)
        if not isinstance(value, Mapping):
            return None
    return rare_status(table, value.get("status"))


def fields_rare_status(table: str, fields: EncodedFields) -> tuple[bool, str | None]:
    """Whether ``fields`` set a task's status, and :func:`rare_status` of the
    status they set."""
    if table not in ("tasks", "approvals") or "status" not in fields.names:
        return False, None
    text = fields.values[fields.names.index("status")]
    return True, rare_status(table, _loads(text))


def _loads(text: str) -> Any:
    """``text`` parsed for its status (a string either parser reads alike; None:
    not JSON). orjson takes only an exact ``str``: an :class:`EncodedRecord`
    (a subclass) is handed over as one, or it would always fall back."""
    try:
        return orjson.loads(text if type(text) is str else str(text))
    except orjson.JSONDecodeError:
        try:
            return json.loads(text)
        except ValueError:
            return None


def check_counted(table: str) -> None:
    """ValueError unless :meth:`Backend.record_count` counts ``table``."""
    if table not in COUNTED_TABLES:
        raise ValueError(f"records of {table!r} are not counted (only {', '.join(COUNTED_TABLES)})")


def check_stream_args(max_batch_size: int, max_duration: float) -> None:
    """The argument checks every backend's :meth:`Backend.stream` makes."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
    if max_duration < 0:
        raise ValueError(f"max_duration must not be negative, got {max_duration}")


def encode_record(value: Mapping[str, Any]) -> EncodedRecord:
    """Encode a record the way every backend stores it (compact JSON, UTF-8 text).

    orjson, because every write of the ledger encodes a record; what it cannot
    encode (an integer beyond 64 bits) falls back to the standard library. Both
    write values JSON has no type for with ``str``; orjson writes a NaN or an
    infinity (which JSON cannot carry) as null.
    """
    try:
        out = EncodedRecord(
            orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        )
    except TypeError:  # orjson.JSONEncodeError is one
        text = json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False)
        out = EncodedRecord(text)
    out.status = _encoded_status(value.get("status"))
    out.owner = _encoded_status(value.get("created_by"))
    return out


# Python types whose JSON is never a string (or is null): such a status is None
# to the index, as its text read back would be.
_NOT_TEXT = (int, float, list, tuple, dict, type(None))


def _encoded_status(status: Any) -> Any:
    """What the text of ``status`` reads back as, for :func:`rare_status`: a
    string as the plain string written (a ``StrEnum`` member's value), None for
    null or a value of any other JSON type, :data:`_UNSAID` where only the text
    can tell (a value written with ``str()``, an ``Enum`` orjson writes by its value)."""
    if isinstance(status, str):
        return str.__str__(status)
    if isinstance(status, _NOT_TEXT):
        return None
    return _UNSAID


def record_text(value: Mapping[str, Any] | EncodedRecord) -> str:
    """The stored text of a record value, encoding it unless it already is."""
    return value if isinstance(value, EncodedRecord) else encode_record(value)


@dataclass(frozen=True)
class EncodedFields:
    """Top-level fields of a record with their values already encoded (by
    :func:`encode_fields`, off the write lock), for :meth:`Transaction.update_records`."""

    names: tuple[str, ...]
    values: tuple[str, ...]


# What orjson cannot encode (an integer beyond 64 bits, a string with an unpaired
# surrogate) is encoded as the standard library would, as encode_record does;
# json.dumps with options builds a new encoder per call: one, built once.
_FIELD_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)


_encode_str = json.encoder.encode_basestring_ascii  # what the encoder does with a str


def _encode_value(value: Any) -> str:
    # Most fields are timestamps, statuses, counts and None: encoded without an encoder.
    kind = type(value)
    if value is None:
        return "null"
    if isinstance(value, str):  # a status is a StrEnum: its value, as both encoders write it
        return str(_encode_str(value))
    if kind is int:
        return int.__repr__(value)  # what either encoder writes, of any size
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError is one
        return _FIELD_ENCODER.encode(value)
    if b"null" in text:
        # orjson writes NaN and infinities as null, which encode_fields refuses:
        # the standard library's encoder raises ValueError for them.
        _FIELD_ENCODER.encode(value)
    return text.decode()


def encode_fields(fields: Mapping[str, Any]) -> EncodedFields:
    """Encode the values of ``fields`` as :func:`encode_record` would inside a
    record (orjson, with its fallback), to the same values once decoded; a
    non-finite number raises ValueError (no JSON has it)."""
    return EncodedFields(tuple(fields), tuple(map(_encode_value, fields.values())))


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


class Backend(Protocol):
    """A database with Spanner-queue semantics."""

    clock: Clock
    redelivery: RedeliveryPolicy
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

    def message_keys(self, queue: str) -> list[tuple[Any, ...]]:
        """The keys of every message in ``queue`` (ready, scheduled or leased), in
        no particular order. The queue holds only unfinished work: reading its
        keys costs the messages, not the ledger."""
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
