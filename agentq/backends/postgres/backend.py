""":class:`PostgresBackend`: the backend contract on PostgreSQL, put together from
the package's parts (connection pool, transactions, queues, leases, records,
wake-ups), and :func:`open_postgres`, which opens it from a ``postgresql://`` URL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from agentq.backends.backlog_sql import backlog_groups, backlog_params, backlog_sql
from agentq.backends.base import (
    BacklogGroup,
    LeaseClaim,
    Message,
    QueueStats,
    RecordFilter,
    RedeliveryPolicy,
    Renewal,
    StoredRecord,
    Tally,
    Transaction,
    check_stream_args,
)
from agentq.backends.notify import RecordTopic, Wake, notifier_for
from agentq.backends.postgres import owners, queues, tallies, totals
from agentq.backends.postgres.bound import bind
from agentq.backends.postgres.config import PostgresConfig, parse_url
from agentq.backends.postgres.connection import Conn, Database
from agentq.backends.postgres.grouping import GroupCommit
from agentq.backends.postgres.leases import Leases
from agentq.backends.postgres.prepared import prepared
from agentq.backends.postgres.queues import QueueSQL
from agentq.backends.postgres.records import Records
from agentq.backends.postgres.schema import notify_sql, qualified
from agentq.backends.postgres.space import SpaceReclaimer
from agentq.backends.postgres.statistics import StatisticsKeeper
from agentq.backends.postgres.transact import Transactions
from agentq.backends.postgres.wakeups import Listener, NotifyingClaim, PollOnly, channel
from agentq.backends.queue_values import lease_seconds_option
from agentq.backends.record_filters import check_counted
from agentq.backends.wakeable import WakeableStream
from agentq.clock import Clock, SystemClock, to_micros
from agentq.errors import (
    BackendUnavailable,
    ConfigError,
    QueueNotFound,
)
from agentq.spec import QueueSpec, validate_identifier

__all__ = ["PostgresBackend", "open_postgres"]

T = TypeVar("T")


class PostgresBackend:
    """Spanner-queue semantics on a PostgreSQL database (psycopg 3, a pool).

    Open it through :func:`agentq.open_backend` with
    ``postgresql://user@host:5432/db?schema=agentq&pool_size=10``.
    """

    def __init__(
        self,
        config: PostgresConfig,
        *,
        clock: Clock | None = None,
        redelivery: RedeliveryPolicy | None = None,
        ttl_sweep_interval: float = 1.0,
    ) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.redelivery = redelivery or RedeliveryPolicy()
        self.ordered_keys = True  # B-tree indexes: keys growing with time share pages
        self.single_writer = False  # transactions run side by side
        self.swaps_in_sets = True  # replace_records / update_records: one statement a set
        self.claims_with_leases = True  # stream(..., claim=): a claim in the lease's commit
        # Other processes' record-only commits send no notification: re-read this often.
        self.commit_poll_interval: float | None = config.poll_interval
        self.schema = config.schema
        self._specs: dict[str, QueueSQL] = {}
        self._records = Records(qualified(config.schema, "records"))
        where = f"postgres:{config.where}/{config.schema}"
        self._notifier = notifier_for(where)
        self._commits = notifier_for(where, "commits")
        self._db = Database(config)
        # Named with a secret of the schema's (see .wakeups): None for a role that
        # may not read it, which then neither notifies nor listens, only polls.
        secret = self._db.wakeup_secret
        self._channel: str | None = None if secret is None else channel(secret)
        # The channel named in SQL, never in the text sent (see schema.notify_sql).
        self._notify_sql = prepared(notify_sql(config.schema))
        self._group = GroupCommit(self._db)  # transact's write path: group commit
        self._transactions = Transactions(
            self._db, self._group, self._now, self._queue_sql, self._records, self._channel,
            self._notify_sql, self._notifier, self._commits,
        )  # fmt: skip
        #: How long a lease lasts (the URL's ``lease_seconds``, default 10 s).
        self.lease_seconds = config.lease_seconds
        self._leases = Leases(
            self._db, self.clock, self.redelivery, ttl_sweep_interval, self.lease_seconds
        )
        # Behind a transaction-pooling pooler LISTEN hears nothing: receivers poll.
        self._listener: Listener | PollOnly = (
            PollOnly() if config.transaction_pooler or self._channel is None
            else Listener(config, self._channel, self._notifier, self._commits,
                          self._read_versions)
        )  # fmt: skip
        self._space = SpaceReclaimer(config, qualified(config.schema, "records"))
        self._statistics = StatisticsKeeper(config)

    @property
    def url(self) -> str:
        return self.config.safe_url

    @property
    def closed(self) -> bool:
        return self._db.closed

    def _now(self) -> int:
        return to_micros(self.clock.now())

    # -- queues --------------------------------------------------------------

    def create_queue(self, spec: QueueSpec) -> None:
        # Read first: a queue already there as specified needs no write transaction
        # (which takes a lock on the specs table that a read-only role may not).
        there = self._db.read(
            lambda conn: queues.exists_as(conn, self.schema, spec), f"reading queue {spec.name!r}"
        )
        if there:
            self._specs[spec.name] = QueueSQL(spec, self.schema)
            return
        self._db.write(
            lambda tx: queues.create_queue(tx.sql, self.schema, spec),
            f"creating queue {spec.name!r}",
        )
        self._specs[spec.name] = QueueSQL(spec, self.schema)

    def _queue_sql(self, name: str, conn: Conn | None = None) -> QueueSQL:
        sql = self._specs.get(name)
        if sql is not None:
            return sql
        validate_identifier(name, "queue name")
        if conn is not None:
            spec = queues.load_spec(conn, self.schema, name)
        else:
            spec = self._db.read(lambda own: queues.load_spec(own, self.schema, name))
        if spec is None:
            raise QueueNotFound(f"queue {name!r} does not exist; create it first")
        sql = QueueSQL(spec, self.schema)
        self._specs[name] = sql
        return sql

    def queue_spec(self, name: str) -> QueueSpec:
        return self._queue_sql(name).spec

    def queues(self) -> list[str]:
        return self._db.read(lambda conn: queues.queue_names(conn, self.schema), "listing queues")

    # -- transactions --------------------------------------------------------

    def transact(
        self, fn: Callable[[Transaction], T], *, durable: bool = True, fenced: bool = False
    ) -> T:
        """:meth:`~agentq.backends.base.Backend.transact`: see
        :mod:`agentq.backends.postgres.transact`."""
        return self._transactions.run(fn, durable=durable, fenced=fenced)

    def bind_transaction(self, connection: Any) -> Transaction:
        """A transaction on the application's own ``connection`` (psycopg 3, or an
        SQLAlchemy 2 session or connection) that the application commits: see
        :mod:`agentq.backends.postgres.bound`. Not re-run on conflicts: a
        serialization failure reaches the application, whose transaction it is."""
        if self._db.closed:
            raise BackendUnavailable("backend is closed")
        return bind(
            connection, self._now(), self.schema, self._queue_sql, self._records, self._channel
        )

    def subscribe_commits(self, wake: Wake, record: RecordTopic | None = None) -> None:
        self._commits.subscribe(wake, record)
        self._listener.start()
        if record is not None:
            self._listener.seed(record)

    def _read_versions(self, table: str, keys: Sequence[str]) -> dict[str, str]:
        return self._records.read_texts(self._db, table, keys)

    def unsubscribe_commits(self, wake: Wake) -> None:
        self._commits.unsubscribe(wake)

    # -- receiving -----------------------------------------------------------

    def stream(
        self,
        queue: str,
        max_batch_size: int = 1,
        max_duration: float = 0.0,
        *,
        claim: LeaseClaim | None = None,
    ) -> Iterator[list[Message]]:
        """:meth:`~agentq.backends.base.Backend.stream`; with ``claim``, each
        lease also makes the swaps it asks for (``claims_with_leases``)."""
        check_stream_args(max_batch_size, max_duration)
        self._queue_sql(queue)  # fail fast on an unknown queue
        if claim is not None:
            claim = NotifyingClaim(claim, self._commits)
            self._statistics.check_soon()  # a worker: its batches' plans need them
        wake, cancelled = threading.Event(), threading.Event()
        batches = self._stream(queue, max_batch_size, max_duration, claim, wake, cancelled)
        return WakeableStream(batches, wake, cancelled)

    def _stream(
        self,
        queue: str,
        max_batch_size: int,
        max_duration: float,
        claim: LeaseClaim | None,
        event: threading.Event,
        cancelled: threading.Event,
    ) -> Generator[list[Message], None, None]:
        deadline = self.clock.monotonic() + max_duration
        # Subscribed before the first lease, so no commit between the lease and
        # the wait is missed.
        self._notifier.subscribe(event, queue)
        try:
            while not self._db.closed:
                event.clear()
                if claim is not None:
                    claim.ready()  # outside the lease's transaction
                # A one-shot receive (drain) ends at its first empty lease: it
                # waits for nothing, so it reads no next visible time (a round
                # trip of every empty lease, one per idle queue each round).
                batch, next_visible = self._leases.lease(
                    self._queue_sql(queue), max_batch_size, claim, self._records,
                    want_next_visible=max_duration > 0,
                )  # fmt: skip
                if batch:
                    yield batch
                    continue
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    return
                if next_visible is not None:
                    until_visible = (next_visible - self._now()) / 1e6
                    remaining = min(remaining, max(until_visible, 0.0))
                self._listener.start()  # other processes' sends: by notification
                if cancelled.is_set():  # after the clear above: a later cancel wakes the wait
                    return
                self.clock.wait(event, min(remaining, self.config.poll_interval))
        finally:
            self._notifier.unsubscribe(event)

    def renew(self, queue: str, tokens: Sequence[str]) -> list[Renewal]:
        return self._leases.renew(self._queue_sql(queue), tokens)

    # -- inspection and records ----------------------------------------------

    def stats(self, queue: str) -> QueueStats:
        return self._leases.stats(self._queue_sql(queue))

    def record_count(self, table: str, *, owner: str | None = None) -> int:
        check_counted(table)
        if owner is not None:
            return self._db.read(lambda conn: owners.owner_count(conn, self.schema, table, owner),
                                 f"counting {table!r} of {owner!r}")  # fmt: skip
        return self._db.read(
            lambda conn: totals.record_count(conn, self.schema, table), f"counting {table!r}"
        )

    def read_tallies(
        self, first_minute: int, end_minute: int, *, width: int = 1, owner: str | None = None
    ) -> list[Tally]:
        return self._db.read(
            lambda conn: tallies.read(conn, self.schema, first_minute, end_minute, width, owner),
            "reading the tallies of finished tasks",
        )

    def delete_tallies(self, before_minute: int) -> int:
        return self._db.read(
            lambda conn: tallies.delete_before(conn, self.schema, before_minute),
            "deleting old tallies of finished tasks",
        )

    def compact_tallies(self, before_minute: int) -> int:
        return self._db.read(
            lambda conn: tallies.fold(conn, self.schema), "folding the tallies of finished tasks"
        )

    def message_keys(self, queue: str, *, delivered: bool = False) -> list[tuple[Any, ...]]:
        sql = self._queue_sql(queue)
        only = " WHERE agentq_lease_expiry IS NOT NULL" if delivered else ""
        rows = self._db.read(
            lambda conn: conn.execute(f"SELECT {sql.key_list} FROM {sql.table}{only}").fetchall(),
            f"reading the keys of queue {queue!r}",
        )
        return [tuple(row) for row in rows]

    def message_count(self, queue: str, at_most: int, *, delivered: bool = False) -> int:
        sql = self._queue_sql(queue)
        bound = max(0, at_most)
        only = " WHERE agentq_lease_expiry IS NOT NULL" if delivered else ""
        rows = self._db.read(
            lambda conn: conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {sql.table}{only} LIMIT %s) AS m", (bound,)
            ).fetchall(),
            f"counting the messages of queue {queue!r}",
        )
        return int(rows[0][0])

    def undelivered_backlog(
        self, queue: str, *, owner: str | None = None, oldest: bool = True
    ) -> list[BacklogGroup]:
        sql = self._queue_sql(queue)
        created_at = "(r.v::json ->> 'created_at') COLLATE \"C\"" if oldest else None
        query = backlog_sql(sql.table, f'"{sql.spec.key[0].name}"', self._records.table,
                            created_at=created_at, mark="%s", owner=owner is not None,
                            join="JOIN")  # fmt: skip
        params = backlog_params(owner)
        rows = self._db.read(lambda conn: conn.execute(query, params).fetchall(),
                             f"counting the backlog of queue {queue!r}")  # fmt: skip
        return backlog_groups(rows)

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        return self._records.read_one(self._db, table, key)

    def read_records(self, table: str, keys: Sequence[str]) -> dict[str, StoredRecord]:
        return self._records.read_versions(self._db, table, keys)

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
        return self._records.list(
            self._db, table, prefix, limit, after, descending=descending, where=where
        )

    def reclaim_space(self, max_bytes: int, *, keep_free: float = 0.0) -> int:
        """A plain ``VACUUM`` of the records table gives back its empty tail (see
        :mod:`agentq.backends.postgres.space`); ``VACUUM FULL`` is the operator's."""
        if self._db.closed:
            raise BackendUnavailable("backend is closed")
        return self._space.reclaim(max_bytes, keep_free)

    def close(self) -> None:
        if self._db.closed:
            return
        self._listener.close()
        self._db.close()
        self._notifier.notify()
        self._commits.notify()
        self._statistics.wait(5.0)  # an ANALYZE under way ends with its connection

    def __enter__(self) -> PostgresBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresBackend({self.config.safe_url!r})"


_OPTIONS = ("redelivery", "ttl_sweep_interval", "lease_seconds")


def open_postgres(url: str, clock: Clock | None, options: Mapping[str, Any]) -> PostgresBackend:
    """Open ``postgresql://user:password@host:port/database?schema=agentq``.

    URL options: ``schema`` (default ``agentq``), ``pool_size`` (10),
    ``pool_timeout`` (30 s), ``poll_interval`` (1 s), ``pooler`` (``session``, or
    ``transaction`` behind PgBouncer in transaction mode), ``lease_seconds`` (10 s);
    the rest go to libpq.
    """
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ConfigError(
            f"unknown PostgreSQL backend option(s) {sorted(unknown)} (known: {', '.join(_OPTIONS)})"
        )
    kwargs = dict(options)
    if "lease_seconds" in kwargs:
        # As the URL's option (which it overrides), so Backend.url shows it.
        lease = lease_seconds_option(kwargs.pop("lease_seconds"))
        url += ("&" if urlsplit(url).query else "?") + f"lease_seconds={lease!r}"
    return PostgresBackend(parse_url(url), clock=clock, **kwargs)
