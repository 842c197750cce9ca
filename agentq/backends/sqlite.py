"""The embedded SQLite backend (the default).

Spanner-queue semantics on one SQLite file. Settings, and why:

* WAL journal: readers never block the writer, and several processes can share
  the file.
* ``synchronous=FULL`` by default: a commit is on disk when ``transact``
  returns. ``durability="normal"`` trades the last commits before a power loss
  (never corruption) for speed. Lease bookkeeping (``durable=False``) is always
  committed at NORMAL: after a power loss it can only be lost, which means an
  earlier redelivery.
* Every write, including leasing, runs in ``BEGIN IMMEDIATE``: the write lock
  is taken up front, so two workers (threads or processes) can never lease the
  same message, and WAL never has to fail a reader-turned-writer with BUSY.
* agentq processes queue for the write lock on a file lock beside the database
  (:mod:`agentq.backends.writer_lock`), so busy workers alternate promptly
  instead of sleeping in SQLite's busy handler; ``busy_timeout`` still makes any
  other writer wait instead of failing, and a transaction that meets BUSY is
  retried as a whole (tenacity).
* One connection per backend object, guarded by a lock: the engine serialises
  writers anyway, and a single connection avoids in-process lock contention.
* Group commit: threads that queue for that connection while a transaction runs
  join it, each in a savepoint (a failing transaction rolls back only itself),
  and the last one commits them all with one fsync. Many agents deciding at
  once therefore commit faster than the disk's single-commit rate; a lone caller
  is unaffected. Reads outside a transaction first commit an open group, so they
  never see uncommitted work.

Each queue is a table named like the queue. Besides the key columns,
``payload`` and ``deliver_time`` (microseconds since the epoch) it keeps
``agentq_*`` system columns: the row id, the lease sequence and expiry, the
expiry count for backoff, and ``agentq_visible_at``, the single indexed time at
which the message is next receivable. A lease token names (row id, lease
sequence, expiry); the sequence of a new message starts at a random 62-bit
value, so a token can never match a later message that reuses a row id (the
cheaper alternative to AUTOINCREMENT, which writes one more page per send).

Receivers wake promptly: an in-process notification on commit, and across
processes the :class:`_Watcher`: an inotify watch of the WAL file on Linux (no
CPU while idle), elsewhere an adaptive 1-10 ms check of it backed by
``PRAGMA data_version`` (about 1-2 % of a core while receivers wait).

Task ids grow with time on this backend (``ordered_keys``): tasks enqueued
together share B-tree pages, so claiming or completing a batch rewrites a few
pages rather than one per task.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import random
import select
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

try:  # Linux: block on file events instead of polling (see _Watcher)
    from inotify_simple import INotify as _INotify
    from inotify_simple import flags as _inotify_flags

    _WATCH_FLAGS = _inotify_flags.MODIFY | _inotify_flags.DELETE_SELF | _inotify_flags.MOVE_SELF
    _LOST_FLAGS = _inotify_flags.DELETE_SELF | _inotify_flags.MOVE_SELF | _inotify_flags.IGNORED
except ImportError:  # pragma: no cover - other platforms poll
    _INotify = None
    _WATCH_FLAGS = _LOST_FLAGS = 0

from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from agentq.backends.base import (
    LEASE_SECONDS,
    EncodedRecord,
    Message,
    QueueStats,
    RedeliveryPolicy,
    Renewal,
    StoredRecord,
    Transaction,
    record_text,
)
from agentq.backends.writer_lock import WriterLock
from agentq.clock import Clock, SystemClock, from_micros, to_micros
from agentq.errors import (
    BackendUnavailable,
    ConfigError,
    DuplicateKey,
    MessageNotFound,
    QueueNotFound,
    TransactionAborted,
    TransactionError,
)
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec, validate_identifier

__all__ = ["SQLiteBackend"]

T = TypeVar("T")

_random = random.Random()  # seeded from os.urandom; only needs to be unpredictable enough

_LEASE_MICROS = int(LEASE_SECONDS * 1_000_000)
_IN_CHUNK = 500  # keys per IN (...) list, well under SQLite's bound-parameter limit
_SQL_TYPES = {KeyType.INT: "INTEGER", KeyType.STR: "TEXT", KeyType.BYTES: "BLOB"}
_TOKEN_PREFIX = "aq1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agentq_queues (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agentq_queue_counters (
    queue TEXT PRIMARY KEY,
    lease_expirations INTEGER NOT NULL DEFAULT 0,
    ttl_dropped INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS agentq_records (
    tbl TEXT NOT NULL,
    k TEXT NOT NULL,
    v TEXT NOT NULL,
    PRIMARY KEY (tbl, k)
) WITHOUT ROWID;
"""


log = logging.getLogger("agentq.sqlite")

_SAFETY_POLL = 0.25  # seconds between checks of the WAL while an inotify watch is active

_MAX_GROUP = 64  # transactions per group commit: bounds how long the first one waits


class _CommitGroup:
    """Transactions that share one BEGIN ... COMMIT (and one fsync)."""

    __slots__ = ("done", "durable", "error", "members", "relaxed")

    def __init__(self, *, durable: bool, relaxed: bool) -> None:
        self.durable = durable
        self.relaxed = relaxed
        self.members = 0
        # Created by the first member that waits (under the connection lock, as is
        # every set): a lone transaction never needs one.
        self.done: threading.Event | None = None
        self.error: BaseException | None = None

    def wake(self) -> None:
        if self.done is not None:
            self.done.set()


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


class _Notifier:
    """Wakes in-process receivers of one database file when a commit may have
    made messages ready."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: set[threading.Event] = set()

    def subscribe(self, event: threading.Event) -> None:
        with self._lock:
            self._events.add(event)

    def unsubscribe(self, event: threading.Event) -> None:
        with self._lock:
            self._events.discard(event)

    def notify(self) -> None:
        with self._lock:
            events = list(self._events)
        for event in events:
            event.set()


_notifiers: weakref.WeakValueDictionary[str, _Notifier] = weakref.WeakValueDictionary()
_notifiers_lock = threading.Lock()


def _notifier_for(path: str) -> _Notifier:
    with _notifiers_lock:
        notifier = _notifiers.get(path)
        if notifier is None:
            notifier = _Notifier()
            _notifiers[path] = notifier
        return notifier


class _Watcher:
    """Notices commits by other processes and wakes this process's waiting receivers.

    While any receiver waits, one thread per backend watches the ``-wal`` file,
    which every commit writes. On Linux it blocks on an inotify watch of that
    file (``inotify_simple``): no CPU while nothing happens, woken within
    microseconds of a commit by any process. It still checks the file every
    ``_SAFETY_POLL`` seconds, and if the watch is lost (the WAL deleted or
    replaced by a foreign tool, say) it polls until it can watch the new file.

    Where inotify is unavailable it polls: ``os.stat`` of the WAL (size,
    modification time) and every tenth time ``PRAGMA data_version``, which
    catches a WAL restart within one timestamp tick; fast right after a change,
    backing off to ``poll_interval`` while the file is quiet (about 1-2 % of a
    core). Either way it runs in real time whatever the clock (it watches a
    file, not application time), and not at all while nobody waits.
    """

    def __init__(
        self, conn: sqlite3.Connection, path: str, notifier: _Notifier, poll_interval: float
    ) -> None:
        self._conn = conn
        self._wal = path + "-wal"
        self._notifier = notifier
        self._interval = poll_interval
        self._fast = min(0.001, poll_interval)
        self._cond = threading.Condition()
        self._waiters = 0
        self._last: tuple[int | None, int, int] | None = None
        self._polls = 0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._inotify: Any = None
        self._watching = False  # an inotify watch of the WAL is in place
        self._wake_r, self._wake_w = os.pipe()
        self.events = 0  # wake-ups by a file event (inotify), for tests and debugging

    @property
    def blocking(self) -> bool:
        """Whether the watch blocks on inotify rather than polling."""
        return self._watching

    def _state(self, ask_sqlite: bool) -> tuple[int | None, int, int]:
        try:
            st = os.stat(self._wal)
            file_state = (st.st_size, st.st_mtime_ns)
        except OSError:
            file_state = (-1, -1)
        version = None
        if ask_sqlite:
            try:
                version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.ProgrammingError:  # closed meanwhile
                version = None
        elif self._last is not None:
            version = self._last[0]
        return (version, *file_state)

    def enter(self) -> None:
        with self._cond:
            if self._waiters == 0:
                self._last = self._state(True)  # baseline before the caller re-leases
            self._waiters += 1
            if self._thread is None:
                self._watch()
                self._thread = threading.Thread(
                    target=self._run, name="agentq-sqlite-watch", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def leave(self) -> None:
        with self._cond:
            self._waiters -= 1

    def _watch(self) -> None:
        """Start (or restart) the inotify watch of the WAL file, if possible."""
        if _INotify is None:
            return
        if self._inotify is None:
            try:
                self._inotify = _INotify(nonblocking=True)
            except OSError as exc:  # inotify limits reached, say: poll instead
                log.info("no inotify (%s); polling %s", exc, self._wal)
                return
        try:
            self._inotify.add_watch(self._wal, _WATCH_FLAGS)
            self._watching = True
        except OSError:
            self._watching = False  # no WAL file just now: poll, and try again each time

    def _run(self) -> None:
        interval = self._fast
        while not self._closed.is_set():
            with self._cond:
                while self._waiters == 0 and not self._closed.is_set():
                    self._cond.wait()
                self._polls += 1
                state = self._state(self._polls % 10 == 0)
                changed = state != self._last
                self._last = state
            if changed:
                self._notifier.notify()
                interval = self._fast
            else:
                interval = min(interval * 1.25, self._interval)
            if self._inotify is not None and not self._watching:
                self._watch()
            if self._watching:
                self._wait_for_event()
            else:
                self._closed.wait(interval)

    def _wait_for_event(self) -> None:
        ready, _, _ = select.select([self._inotify, self._wake_r], [], [], _SAFETY_POLL)
        if self._inotify in ready:
            events = self._inotify.read(timeout=0)
            self.events += 1
            if any(e.mask & _LOST_FLAGS for e in events):
                self._watch()  # the WAL was deleted or replaced: watch the new one
            self._notifier.notify()

    def close(self) -> None:
        self._closed.set()
        os.write(self._wake_w, b"x")
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(1.0)
        with self._cond:
            self._conn.close()
            if self._inotify is not None:
                self._inotify.close()
            os.close(self._wake_r)
            os.close(self._wake_w)


def _encode_token(queue: str, msg_id: int, seq: int, expiry: int) -> str:
    raw = f"{_TOKEN_PREFIX}|{queue}|{msg_id}|{seq}|{expiry}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(queue: str, token: object) -> tuple[int, int, int] | None:
    """(message id, lease sequence, expiry micros), or None if unparsable."""
    if not isinstance(token, str) or not token or len(token) > 512:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        prefix, q, msg_id, seq, expiry = raw.split("|")
        if prefix != _TOKEN_PREFIX or q != queue:
            return None
        return int(msg_id), int(seq), int(expiry)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


class _QueueSQL:
    """Prepared SQL text of one queue (identifiers already validated)."""

    def __init__(self, spec: QueueSpec) -> None:
        self.spec = spec
        q = f'"{spec.name}"'
        keys = [f'"{c.name}"' for c in spec.key]
        self.key_list = ", ".join(keys)
        self.key_where = " AND ".join(f"{k} = ?" for k in keys)
        self.insert = (
            f"INSERT INTO {q} ({self.key_list}, payload, deliver_time, agentq_visible_at, "
            f"agentq_lease_seq) VALUES ({', '.join('?' * len(keys))}, ?, ?, ?, ?)"
        )
        self.delete = f"DELETE FROM {q} WHERE {self.key_where}"
        self.select_ready = (
            f"SELECT agentq_msg_id, {self.key_list}, payload, deliver_time, agentq_lease_seq, "
            f"agentq_lease_expiry, agentq_expirations FROM {q} "
            "WHERE agentq_visible_at <= ? ORDER BY agentq_visible_at, agentq_msg_id LIMIT ?"
        )
        self.update_lease = (
            f"UPDATE {q} SET agentq_lease_seq = ?, agentq_lease_expiry = ?, "
            "agentq_visible_at = ?, agentq_expirations = ? WHERE agentq_msg_id = ?"
        )
        self.select_by_id = (
            f"SELECT agentq_lease_seq, deliver_time, agentq_expirations FROM {q} "
            "WHERE agentq_msg_id = ?"
        )
        self.next_visible = f"SELECT MIN(agentq_visible_at) FROM {q}"
        self.ttl_delete = f"DELETE FROM {q} WHERE deliver_time < ?"
        self.stats = (
            "SELECT COUNT(*), "
            "COALESCE(SUM(agentq_visible_at <= :now), 0), "
            "COALESCE(SUM(agentq_lease_expiry IS NULL AND deliver_time > :now), 0), "
            "COALESCE(SUM(agentq_lease_expiry > :now), 0), "
            "MIN(CASE WHEN deliver_time <= :now THEN deliver_time END) "
            f"FROM {q}"
        )

    def ddl(self, parent_keys: list[str] | None) -> list[str]:
        spec = self.spec
        cols = [f'"{c.name}" {_SQL_TYPES[c.type]} NOT NULL' for c in spec.key]
        payload_type = "BLOB" if spec.payload is PayloadType.BYTES else "TEXT"
        fk = ""
        if spec.parent is not None and parent_keys is not None:
            child = ", ".join(f'"{c.name}"' for c in spec.key[: len(parent_keys)])
            parent = ", ".join(f'"{k}"' for k in parent_keys)
            fk = (
                f',\n    FOREIGN KEY ({child}) REFERENCES "{spec.parent}" ({parent}) '
                "ON DELETE CASCADE"
            )
        table = (
            f'CREATE TABLE IF NOT EXISTS "{spec.name}" (\n'
            "    agentq_msg_id INTEGER PRIMARY KEY,\n"
            f"    {', '.join(cols)},\n"
            f"    payload {payload_type} NOT NULL,\n"
            "    deliver_time INTEGER NOT NULL,\n"
            "    agentq_visible_at INTEGER NOT NULL,\n"
            "    agentq_lease_seq INTEGER NOT NULL DEFAULT 0,\n"
            "    agentq_lease_expiry INTEGER,\n"
            "    agentq_expirations INTEGER NOT NULL DEFAULT 0,\n"
            f"    UNIQUE ({self.key_list}){fk}\n)"
        )
        stmts = [
            table,
            f'CREATE INDEX IF NOT EXISTS "{spec.name}_agentq_visible" '
            f'ON "{spec.name}" (agentq_visible_at, agentq_msg_id)',
        ]
        if spec.ttl is not None:
            stmts.append(
                f'CREATE INDEX IF NOT EXISTS "{spec.name}_agentq_deliver" '
                f'ON "{spec.name}" (deliver_time)'
            )
        return stmts


def _decode_or_raw(spec: QueueSpec, data: bytes) -> Any:
    """The payload, or its raw text if it is not valid JSON (written around agentq):
    the consumer then sees a malformed payload and can dead-letter it, instead of
    a lease that fails forever."""
    try:
        return spec.decode_payload(data)
    except ValueError:
        # A TEXT column hands back str: bytes(str) would raise TypeError (defect 8).
        return data if isinstance(data, str) else bytes(data).decode("utf-8", errors="replace")


def _spec_to_json(spec: QueueSpec) -> str:
    return json.dumps(
        {
            "name": spec.name,
            "key": [[c.name, c.type.value] for c in spec.key],
            "payload": spec.payload.value,
            "parent": spec.parent,
            "ttl": spec.ttl.total_seconds() if spec.ttl else None,
            "max_payload_bytes": spec.max_payload_bytes,
        },
        sort_keys=True,
    )


def _spec_from_json(text: str) -> QueueSpec:
    d = json.loads(text)
    return QueueSpec(
        d["name"],
        tuple(KeyColumn(n, KeyType(t)) for n, t in d["key"]),
        payload=PayloadType(d["payload"]),
        parent=d["parent"],
        ttl=timedelta(seconds=d["ttl"]) if d["ttl"] else None,
        max_payload_bytes=d["max_payload_bytes"],
    )


class _SQLiteTransaction(Transaction):
    def __init__(self, backend: SQLiteBackend, conn: sqlite3.Connection, now: int) -> None:
        self._backend = backend
        self._conn = conn
        self._now = now
        self.doomed: TransactionError | None = None
        self.sent = False

    @property
    def now(self) -> datetime:
        return from_micros(self._now)

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
        sql = self._backend._queue_sql(queue, self._conn)
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
        self.sent = True

    def ack(self, queue: str, key: Sequence[Any] | Any, must_exist: bool = True) -> bool:
        sql = self._backend._queue_sql(queue, self._conn)
        parts = sql.spec.check_key(key)
        deleted = self._conn.execute(sql.delete, parts).rowcount
        if deleted == 0 and must_exist:
            raise self._doom(
                MessageNotFound(
                    f"queue {queue!r} has no message with key {parts!r} (already acknowledged)"
                )
            )
        return deleted > 0

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, params).fetchall())

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        return _get_record(self._conn, table, key)

    def put_record(self, table: str, key: str, value: Mapping[str, Any] | EncodedRecord) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO agentq_records (tbl, k, v) VALUES (?, ?, ?)",
            (_record_table(table), key, record_text(value)),
        )

    def insert_record(self, table: str, key: str, value: Mapping[str, Any]) -> bool:
        cur = self._conn.execute(
            "INSERT OR IGNORE INTO agentq_records (tbl, k, v) VALUES (?, ?, ?)",
            (_record_table(table), key, record_text(value)),
        )
        return cur.rowcount > 0

    def delete_record(self, table: str, key: str) -> bool:
        cur = self._conn.execute("DELETE FROM agentq_records WHERE tbl = ? AND k = ?", (table, key))
        return cur.rowcount > 0

    def replace_records(
        self, table: str, items: Sequence[tuple[str, str, Mapping[str, Any] | EncodedRecord]]
    ) -> list[str]:
        # The version is the stored JSON text itself: comparing it is one memcmp in
        # SQLite, and no other writer can make an equal text mean something else.
        _record_table(table)
        execute = self._conn.execute
        return [
            key
            for key, version, value in items
            if execute(
                "UPDATE agentq_records SET v = ? WHERE tbl = ? AND k = ? AND v = ?",
                (record_text(value), table, key, version),
            ).rowcount
            == 0
        ]


_RECORD_TABLES: set[str] = set()


def _record_table(table: str) -> str:
    if table not in _RECORD_TABLES:
        _RECORD_TABLES.add(validate_identifier(table, "record table"))
    return table


def _get_record(conn: sqlite3.Connection, table: str, key: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT v FROM agentq_records WHERE tbl = ? AND k = ?", (table, key)
    ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


class SQLiteBackend:
    """Spanner-queue semantics on an embedded SQLite database.

    ``path`` is a file path or ``":memory:"``. Open it through
    :func:`agentq.open_backend` with ``sqlite:///path/to.db``.
    """

    def __init__(
        self,
        path: str,
        *,
        clock: Clock | None = None,
        durability: str = "full",
        redelivery: RedeliveryPolicy | None = None,
        busy_timeout: float = 30.0,
        poll_interval: float = 0.01,
        ttl_sweep_interval: float = 1.0,
    ) -> None:
        if durability not in ("full", "normal"):
            raise ConfigError(f"durability must be 'full' or 'normal', not {durability!r}")
        self.clock: Clock = clock or SystemClock()
        self.redelivery = redelivery or RedeliveryPolicy()
        self.ordered_keys = True  # one B-tree per table: locality, no hotspot
        self.single_writer = True
        self.durability = durability
        self.poll_interval = poll_interval
        self.ttl_sweep_interval = ttl_sweep_interval
        self._memory = path == ":memory:"
        self._path = path if self._memory else os.path.abspath(path)
        self._busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._local = threading.local()
        # Group commit: how many threads are queued for the connection (by
        # durability: only like joins like), and the transaction they may join.
        self._arrivals = [0, 0]  # [bookkeeping, durable]
        self._arrivals_lock = threading.Lock()
        self._group: _CommitGroup | None = None
        self._specs: dict[str, _QueueSQL] = {}
        self._last_sweep: dict[str, float] = {}
        self._closed = False
        notifier_key = f"memory:{id(self)}" if self._memory else self._path
        self._notifier = _notifier_for(notifier_key)
        self._conn = self._connect()
        self._writer = None if self._memory else WriterLock(self._path, busy_timeout)
        self._watcher = (
            None
            if self._memory
            else _Watcher(self._connect(), self._path, self._notifier, poll_interval)
        )
        with self._lock:
            self._conn.executescript(_SCHEMA)

    # -- connections -------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._path,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # guarded by self._lock
                timeout=self._busy_timeout,
            )
            if not self._memory:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise BackendUnavailable(f"{self._path}: cannot enable WAL (got {mode})")
            conn.execute(f"PRAGMA synchronous={self.durability.upper()}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open SQLite database {self._path!r}: {exc}") from exc
        return conn

    @property
    def url(self) -> str:
        return f"sqlite:///{self._path}"

    @property
    def path(self) -> str:
        """Database file path, or ``:memory:``."""
        return self._path

    def _now(self) -> int:
        return to_micros(self.clock.now())

    # -- queues --------------------------------------------------------------

    def create_queue(self, spec: QueueSpec) -> None:
        def create(tx: _SQLiteTransaction) -> None:
            conn = tx._conn
            row = conn.execute(
                "SELECT spec FROM agentq_queues WHERE name = ?", (spec.name,)
            ).fetchone()
            wanted = _spec_to_json(spec)
            if row is not None:
                if row[0] != wanted:
                    raise ConfigError(
                        f"queue {spec.name!r} already exists with a different spec: {row[0]}"
                    )
                return
            parent_keys = None
            if spec.parent is not None:
                info = conn.execute(f'PRAGMA table_info("{spec.parent}")').fetchall()
                parent_keys = [r[1] for r in sorted(info, key=lambda r: r[5]) if r[5] > 0]
                if not parent_keys:
                    raise ConfigError(
                        f"queue {spec.name!r}: parent table {spec.parent!r} does not exist "
                        "or has no primary key"
                    )
                prefix = [c.name for c in spec.key[: len(parent_keys)]]
                if [p.lower() for p in prefix] != [k.lower() for k in parent_keys]:
                    raise ConfigError(
                        f"queue {spec.name!r}: its leading key columns {prefix} must be the "
                        f"primary key of {spec.parent!r} {parent_keys}"
                    )
            for stmt in _QueueSQL(spec).ddl(parent_keys):
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO agentq_queues (name, spec) VALUES (?, ?)", (spec.name, wanted)
            )

        self.transact(create)  # type: ignore[arg-type]
        with self._lock:
            self._specs[spec.name] = _QueueSQL(spec)

    def _queue_sql(self, name: str, conn: sqlite3.Connection | None = None) -> _QueueSQL:
        sql = self._specs.get(name)
        if sql is not None:
            return sql
        validate_identifier(name, "queue name")
        with self._lock:
            self._settle()
            row = (
                (conn or self._conn)
                .execute("SELECT spec FROM agentq_queues WHERE name = ?", (name,))
                .fetchone()
            )
        if row is None:
            raise QueueNotFound(f"queue {name!r} does not exist; create it first")
        sql = _QueueSQL(_spec_from_json(row[0]))
        self._specs[name] = sql
        return sql

    def queue_spec(self, name: str) -> QueueSpec:
        return self._queue_sql(name).spec

    def queues(self) -> list[str]:
        with self._lock:
            self._settle()
            rows = self._conn.execute("SELECT name FROM agentq_queues ORDER BY name").fetchall()
        return [r[0] for r in rows]

    # -- transactions -------------------------------------------------------

    def _write(self, body: Callable[[sqlite3.Connection], T], durable: bool = True) -> T:
        """Run ``body`` inside BEGIN IMMEDIATE ... COMMIT, retrying on BUSY.

        The first attempt runs directly; only a BUSY error (another process held
        the lock past ``busy_timeout``) builds the tenacity retry loop, keeping
        the common path cheap.
        """
        if self._closed:
            raise BackendUnavailable("backend is closed")
        if getattr(self._local, "in_tx", False):
            raise TransactionError("transactions cannot be nested")
        try:
            return self._write_once(body, durable)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
        retrying = Retrying(
            retry=retry_if_exception(_is_busy),
            wait=wait_random_exponential(multiplier=0.005, max=0.5),
            stop=stop_after_delay(self._busy_timeout),
            sleep=self.clock.sleep,
            reraise=True,
        )
        try:
            result: T = retrying(self._write_once, body, durable)
            return result
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise TransactionAborted(
                    f"database {self._path!r} stayed locked for {self._busy_timeout}s"
                ) from exc
            raise

    def _write_once(
        self, body: Callable[[sqlite3.Connection], T], durable: bool, retry: bool = True
    ) -> T:
        """Run ``body`` in the open commit group, or open one, and return once the
        group has committed.

        Group commit: threads that queue for the connection while a transaction
        runs join it, each in its own savepoint (a failing body rolls back only
        itself), and the last of them commits all with one fsync. A lone caller
        pays one uncontended counter update; its transaction is opened and
        committed as before.
        """
        kind = int(durable)
        with self._arrivals_lock:
            self._arrivals[kind] += 1
        self._lock.acquire()
        with self._arrivals_lock:
            self._arrivals[kind] -= 1
        waiting: _CommitGroup | None = None
        try:
            self._local.in_tx = True
            group = self._group
            if group is not None and group.durable != durable:
                # A group committed at NORMAL cannot carry a durable transaction, and
                # bookkeeping should not wait for an fsync it does not need.
                self._commit_group_quietly()
                group = None
            if group is None:
                group = self._open_group(durable)
                result = self._run_first(group, body)
            else:
                result = self._run_joined(group, body)
            if self._arrivals[kind] and group.members < _MAX_GROUP:
                waiting = group  # whoever joins next commits, or hands on again
                if group.done is None:
                    group.done = threading.Event()
            else:
                self._commit_group()
        finally:
            self._local.in_tx = False
            self._lock.release()
        if waiting is not None:
            assert waiting.done is not None
            waiting.done.wait()
            if waiting.error is not None:
                if not retry:
                    raise TransactionAborted(str(waiting.error)) from waiting.error
                # Our body succeeded; the shared COMMIT failed (or another member's
                # error rolled everything back). Nothing of ours was written: run it
                # again on its own, as transact may re-run a function on an abort.
                return self._write_once(body, durable, retry=False)
        return result

    def _open_group(self, durable: bool) -> _CommitGroup:
        relax = not durable and self.durability == "full"
        if relax:
            # Lease bookkeeping need not reach the disk before we go on: if a
            # power loss drops it, the message is simply redelivered sooner.
            # The next durable commit syncs these WAL frames too.
            self._conn.execute("PRAGMA synchronous=NORMAL")
        writer = self._writer
        if writer is not None:
            writer.acquire()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._close_group_state(relax)
            raise
        group = _CommitGroup(durable=durable, relaxed=relax)
        self._group = group
        return group

    def _run_first(self, group: _CommitGroup, body: Callable[[sqlite3.Connection], T]) -> T:
        # Nobody else is in the transaction yet: a failure rolls back all of it.
        try:
            result = body(self._conn)
        except BaseException:
            self._group = None
            try:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            finally:
                self._close_group_state(group.relaxed)
                group.wake()
            raise
        group.members += 1
        return result

    def _run_joined(self, group: _CommitGroup, body: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        conn.execute("SAVEPOINT agentq_member")
        try:
            result = body(conn)
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK TO agentq_member")
                conn.execute("RELEASE agentq_member")
                if group.members and not self._arrivals[int(group.durable)]:
                    self._commit_group_quietly()  # the others' work must not wait on us
            else:
                # SQLite rolled the whole transaction back (disk full, I/O error):
                # the members before us lost their work too and must be told.
                self._fail_group(exc)
            raise
        conn.execute("RELEASE agentq_member")
        group.members += 1
        return result

    def _commit_group(self) -> None:
        """COMMIT the open group (the caller holds the lock) and wake its members."""
        group = self._group
        if group is None:
            return
        self._group = None
        try:
            self._conn.execute("COMMIT")
        except BaseException as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            group.error = TransactionAborted(
                f"the commit shared with other transactions failed, nothing was written: {exc}"
            )
            raise
        finally:
            self._close_group_state(group.relaxed)
            group.wake()

    def _commit_group_quietly(self) -> None:
        try:
            self._commit_group()
        except Exception:
            log.warning("a group commit failed; its members were told", exc_info=True)

    def _fail_group(self, exc: BaseException) -> None:
        group, self._group = self._group, None
        if group is None:
            return
        group.error = TransactionAborted(
            f"rolled back with another transaction of its commit group ({exc}); retry it"
        )
        self._close_group_state(group.relaxed)
        group.wake()

    def _close_group_state(self, relaxed: bool) -> None:
        if self._writer is not None:
            self._writer.release()
        if relaxed:
            self._conn.execute("PRAGMA synchronous=FULL")

    def _settle(self) -> None:
        """Commit an open group before this thread reads outside a transaction (the
        caller holds the lock): a read must never see uncommitted members."""
        if self._group is not None and not getattr(self._local, "in_tx", False):
            self._commit_group_quietly()

    def transact(self, fn: Callable[[Transaction], T], *, durable: bool = True) -> T:
        sent = False

        def body(conn: sqlite3.Connection) -> T:
            nonlocal sent
            tx = _SQLiteTransaction(self, conn, self._now())
            result = fn(tx)
            if tx.doomed is not None:
                raise tx.doomed
            sent = tx.sent
            return result

        result = self._write(body, durable)
        if sent:
            self._notifier.notify()
        return result

    # -- receiving -----------------------------------------------------------

    def _lease(self, queue: str, max_batch_size: int) -> tuple[list[Message], int | None]:
        """Lease up to ``max_batch_size`` ready messages; also return the next
        time a message becomes visible when none is ready."""
        sql = self._queue_sql(queue)
        spec = sql.spec
        nkeys = len(spec.key)
        policy = self.redelivery

        def body(conn: sqlite3.Connection) -> tuple[list[Any], int, int | None]:
            now = self._now()
            self._maybe_sweep_ttl(conn, sql, now)
            rows = conn.execute(sql.select_ready, (now, max_batch_size)).fetchall()
            if not rows:
                return [], now, conn.execute(sql.next_visible).fetchone()[0]
            expiry = now + _LEASE_MICROS
            updates = []
            expired = 0
            for row in rows:
                deliver, seq, prev_expiry, expirations = row[2 + nkeys :]
                if prev_expiry is not None:
                    # Leased before and never acked: that lease expired.
                    expirations += 1
                    expired += 1
                backoff = policy.delay(expirations + 1, (now - deliver) / 1e6)
                visible = expiry + int(backoff * 1_000_000)
                updates.append((seq + 1, expiry, visible, expirations, row[0]))
            conn.executemany(sql.update_lease, updates)
            if expired:
                self._count(conn, queue, "lease_expirations", expired)
            return rows, expiry, None

        rows, expiry, next_visible = self._write(body, durable=False)
        # Messages are built after COMMIT: decoding payloads and encoding tokens need
        # not hold the write lock that every other writer is waiting for.
        last = len(rows) - 1
        lease_expiry = from_micros(expiry)
        messages = [
            Message(
                queue=queue,
                key=tuple(row[1 : 1 + nkeys]),
                payload=_decode_or_raw(spec, row[1 + nkeys]),
                deliver_time=from_micros(row[2 + nkeys]),
                lease_token=_encode_token(queue, row[0], row[3 + nkeys] + 1, expiry),
                lease_expiry=lease_expiry,
                last_in_batch=i == last,
            )
            for i, row in enumerate(rows)
        ]
        return messages, next_visible

    def _count(self, conn: sqlite3.Connection, queue: str, column: str, n: int) -> None:
        conn.execute(
            f"INSERT INTO agentq_queue_counters (queue, {column}) VALUES (?, ?) "
            f"ON CONFLICT (queue) DO UPDATE SET {column} = {column} + excluded.{column}",
            (queue, n),
        )

    def _maybe_sweep_ttl(self, conn: sqlite3.Connection, sql: _QueueSQL, now: int) -> None:
        ttl = sql.spec.ttl
        if ttl is None:
            return
        mono = self.clock.monotonic()
        last = self._last_sweep.get(sql.spec.name)
        if last is not None and mono - last < self.ttl_sweep_interval:
            return
        self._last_sweep[sql.spec.name] = mono
        cutoff = now - int(ttl.total_seconds() * 1_000_000)
        dropped = conn.execute(sql.ttl_delete, (cutoff,)).rowcount
        if dropped:
            self._count(conn, sql.spec.name, "ttl_dropped", dropped)

    def stream(
        self, queue: str, max_batch_size: int = 1, max_duration: float = 0.0
    ) -> Iterator[list[Message]]:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_duration < 0:
            raise ValueError(f"max_duration must not be negative, got {max_duration}")
        self._queue_sql(queue)  # fail fast on an unknown queue
        return self._stream(queue, max_batch_size, max_duration)

    def _stream(
        self, queue: str, max_batch_size: int, max_duration: float
    ) -> Iterator[list[Message]]:
        deadline = self.clock.monotonic() + max_duration
        event = threading.Event()
        # Subscribe before the first lease so no commit between the lease and the
        # wait can be missed (in process: the notifier; across processes: the watcher).
        self._notifier.subscribe(event)
        watching = False
        try:
            while not self._closed:
                event.clear()
                batch, next_visible = self._lease(queue, max_batch_size)
                if batch:
                    yield batch
                    continue
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    return
                if next_visible is not None:
                    until_visible = (next_visible - self._now()) / 1e6
                    remaining = min(remaining, max(until_visible, 0.0))
                if not watching and self._watcher is not None:
                    self._watcher.enter()
                    watching = True
                    continue  # lease once more: a commit may have landed before the watch
                self.clock.wait(event, remaining)
        finally:
            if watching and self._watcher is not None:
                self._watcher.leave()
            self._notifier.unsubscribe(event)

    def renew(self, queue: str, tokens: Sequence[str]) -> list[Renewal]:
        sql = self._queue_sql(queue)
        parsed = [(t, _decode_token(queue, t)) for t in tokens]
        policy = self.redelivery

        def body(conn: sqlite3.Connection) -> list[Renewal]:
            now = self._now()
            out: list[Renewal] = []
            for token, info in parsed:
                if info is None:
                    continue  # unparsable: no row
                msg_id, seq, expiry = info
                if expiry <= now:
                    continue  # expired: no row
                row = conn.execute(sql.select_by_id, (msg_id,)).fetchone()
                if row is None or row[0] != seq:
                    # Acknowledged (or superseded) while the token is still unexpired.
                    out.append(Renewal(token, None, from_micros(expiry)))
                    continue
                _, deliver, expirations = row
                new_seq = seq + 1
                new_expiry = now + _LEASE_MICROS
                backoff = policy.delay(expirations + 1, (now - deliver) / 1e6)
                conn.execute(
                    sql.update_lease,
                    (
                        new_seq,
                        new_expiry,
                        new_expiry + int(backoff * 1_000_000),
                        expirations,
                        msg_id,
                    ),
                )
                out.append(
                    Renewal(
                        token,
                        _encode_token(queue, msg_id, new_seq, new_expiry),
                        from_micros(new_expiry),
                    )
                )
            return out

        return self._write(body, durable=False)

    # -- inspection and records ----------------------------------------------

    def stats(self, queue: str) -> QueueStats:
        sql = self._queue_sql(queue)
        now = self._now()
        with self._lock:
            self._settle()
            total, ready, scheduled, leased, oldest = self._conn.execute(
                sql.stats, {"now": now}
            ).fetchone()
            counters = self._conn.execute(
                "SELECT lease_expirations, ttl_dropped FROM agentq_queue_counters WHERE queue = ?",
                (queue,),
            ).fetchone() or (0, 0)
        return QueueStats(
            queue=queue,
            depth=total,
            ready=ready,
            scheduled=scheduled,
            leased=leased,
            backing_off=total - ready - scheduled - leased,
            oldest_unacked_age=None if oldest is None else (now - oldest) / 1e6,
            lease_expirations=counters[0],
            ttl_dropped=counters[1],
        )

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            self._settle()
            return _get_record(self._conn, table, key)

    def read_records(self, table: str, keys: Sequence[str]) -> dict[str, StoredRecord]:
        out: dict[str, StoredRecord] = {}
        wanted = list(dict.fromkeys(keys))
        for first in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[first : first + _IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            with self._lock:
                self._settle()
                rows = self._conn.execute(
                    f"SELECT k, v FROM agentq_records WHERE tbl = ? AND k IN ({marks})",
                    (table, *chunk),
                ).fetchall()
            # Decoded outside the lock: a writer may use the connection meanwhile.
            for key, text in rows:
                out[key] = StoredRecord(value=dict(json.loads(text)), version=text)
        return out

    def list_records(
        self, table: str, prefix: str = "", limit: int | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        # Keys with the prefix form one contiguous range of the primary key.
        sql = "SELECT k, v FROM agentq_records WHERE tbl = ? AND k >= ?"
        params: list[Any] = [table, prefix]
        if prefix:
            sql += " AND k < ?"
            params.append(prefix[:-1] + chr(ord(prefix[-1]) + 1))
        sql += " ORDER BY k LIMIT ?"
        params.append(-1 if limit is None else limit)
        with self._lock:
            self._settle()
            rows = self._conn.execute(sql, params).fetchall()
        return [(k, dict(json.loads(v))) for k, v in rows]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._settle()
            self._conn.close()
            if self._writer is not None:
                self._writer.close()
        if self._watcher is not None:
            self._watcher.close()
        self._notifier.notify()

    def __enter__(self) -> SQLiteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self._path!r}, durability={self.durability!r})"


def open_sqlite(url: str, clock: Clock | None, options: Mapping[str, Any]) -> SQLiteBackend:
    """Open ``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``sqlite:///:memory:``."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ConfigError(f"SQLite URL {url!r} must not have a host: use sqlite:///path/to.db")
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        raise ConfigError(f"SQLite URL {url!r} has no path: use sqlite:///path/to.db")
    kwargs: dict[str, Any] = {}
    for name, values in parse_qs(parts.query).items():
        if name != "durability":
            raise ConfigError(f"unknown SQLite URL option {name!r} (known: durability)")
        kwargs["durability"] = values[-1]
    kwargs.update(options)
    return SQLiteBackend(path, clock=clock, **kwargs)
