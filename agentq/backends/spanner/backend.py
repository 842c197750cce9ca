"""The Google Cloud Spanner backend (``spanner://projects/P/instances/I/databases/D``).

Spanner queues are the real thing this contract mirrors; this package maps the
contract onto google-cloud-spanner (>= 3.71, the first with ``Transaction.send``
and ``ack``) in both SQL dialects. One module per concern:

* :mod:`.config` parses the URL, :mod:`.dialect` and :mod:`.ddl` write the SQL
  (plain Python: DDL prints without the client library or credentials);
* :mod:`.connect` builds the client: every call gets a deadline (``timeout``),
  opening checks the endpoint answers, ``database_role`` selects a
  fine-grained access control role;
* :mod:`.transact` runs transactions and maps their errors narrowly (only the
  ack's own NOT_FOUND and the assert's own OUT_OF_RANGE are
  ``MessageNotFound``), rolling back on every exception leaving the function;
  :mod:`.transaction` is the contract's ``tx`` (queue mutations, records with
  read-your-writes, application SQL);
* :mod:`.receiving` streams long-lived ``RECEIVE`` calls, :mod:`.leases` renews,
  both through :mod:`.streaming` (the raw gRPC stream, sent once);
* :mod:`.records`, :mod:`.inspection` and :mod:`.catalog` (the queues ``agentq
  init`` recorded) read outside transactions; :mod:`.sizing` knows the
  documented limits a worker checks itself against.

Design of receiving (the documents' practice, see :mod:`.receiving` and
:mod:`agentq.executor.receiving`): one RECEIVE of ``receive_duration`` (default
20 minutes) per worker per queue, open only while the worker has a free slot and
asking for batches of at most the free slots, ended when a batch fills the
worker, re-issued when it ends and with backoff after errors; rows whose lease
expired before arrival are skipped; renewals run on the local monotonic clock
from the lease's estimated grant.

Failure modes, and what happens:

* the endpoint is unreachable: opening fails with ``BackendUnavailable`` naming
  it; later, each call fails within ``timeout`` and the worker retries;
* a commit's outcome is unknown (UNAVAILABLE / DEADLINE_EXCEEDED at commit):
  ``BackendUnavailable`` saying so; a strict ack makes a repeat safe;
* a RECEIVE stream breaks or is cancelled: rows sent on it come back after
  their 10 s lease plus Spanner's redelivery backoff;
* a renewal fails: the lease is kept and renewal retried (never marked lost on
  an error); if Spanner did extend it, the token we hold is stale and the lease
  ends 10 s later: the task may run twice, its completion's strict ack decides;
* the worker's clock is skewed: renewals are unaffected (monotonic, local);
  the expired-on-receipt check compares Spanner's expiry with the local clock
  and may skip (skew ahead) or keep (skew behind) a borderline row.

The client's built-in metrics are disabled so they cannot take over the
application's OpenTelemetry meter provider; ``close`` never blocks for long.
DDL is applied by ``agentq init`` (or ``ddl=auto`` in the URL), not on every
start: schema changes on Spanner take long-running operations.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agentq.backends.base import (
    LEASE_SECONDS,
    BacklogGroup,
    QueueStats,
    RecordFilter,
    RedeliveryPolicy,
    Renewal,
    StoredRecord,
    Tally,
    Transaction,
    check_stream_args,
)
from agentq.backends.notify import Notifier, RecordTopic, Wake
from agentq.backends.spanner import records
from agentq.backends.spanner.added_columns import AddedColumns
from agentq.backends.spanner.api_errors import API_ERRORS, api_error
from agentq.backends.spanner.catalog import record_specs, stored_specs
from agentq.backends.spanner.config import ReceiveShort
from agentq.backends.spanner.ddl import ddl
from agentq.backends.spanner.dialect import Dialect
from agentq.backends.spanner.held import HeldLeases
from agentq.backends.spanner.inspection import queue_stats
from agentq.backends.spanner.leases import renew_leases
from agentq.backends.spanner.receiving import ReceiveStream
from agentq.backends.spanner.shape import check_shape
from agentq.backends.spanner.sizing import sizing_warnings
from agentq.backends.spanner.transact import transact
from agentq.backends.spanner.transaction import SpannerTransaction
from agentq.clock import Clock, SystemClock
from agentq.errors import BackendUnavailable, ConfigError, QueueNotFound
from agentq.spec import QueueSpec, check_new_queue_name, validate_identifier

__all__ = ["SpannerBackend"]

T = TypeVar("T")
log = logging.getLogger("agentq.backends.spanner")


class SpannerBackend(AddedColumns):
    """Spanner-queue contract on Google Cloud Spanner."""

    def __init__(
        self,
        database: Any,
        *,
        url: str,
        postgres: bool,
        clock: Clock | None = None,
        redelivery: RedeliveryPolicy | None = None,
        transaction_timeout: float = 60.0,
        auto_ddl: bool = False,
        unavailable_backoff: float = 0.5,
        endpoint: str = "spanner.googleapis.com",
        call_timeout: float = 30.0,
        receive_duration: float = 1200.0,
        receive_short: ReceiveShort | None = None,
        namespace: str = "",
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        # Spanner decides redelivery itself; the policy here only documents it.
        self.redelivery = redelivery or RedeliveryPolicy()
        self.lease_seconds = LEASE_SECONDS  # a Spanner queue's, fixed
        self.ordered_keys = False  # keys growing with time would hotspot one split
        self.single_writer = False
        self.swaps_in_sets = False
        self.database = database
        self.dialect = Dialect(postgres, namespace)
        self.transaction_timeout = transaction_timeout
        self.auto_ddl = auto_ddl
        self.unavailable_backoff = unavailable_backoff
        #: Where calls go, for error messages.
        self.endpoint = endpoint
        #: The deadline of one call (seconds).
        self.call_timeout = call_timeout
        #: How long one long-lived RECEIVE of a worker lasts (seconds).
        self.receive_duration = receive_duration
        #: How a one-shot receive is sent (URL option ``receive_short``).
        self.receive_short = receive_short or ReceiveShort()
        #: Queues whose due messages this role may not read (see :mod:`.due`).
        self.undue_unknown: set[str] = set()
        #: Leases handed out here and not known to be over (see :mod:`.held`).
        self.held = HeldLeases()
        self._url = url
        #: Called by :meth:`close` to close the client's channels (set on open).
        self.channel_closers: list[Callable[[], None]] = []
        #: Queues seen to exist (:func:`~agentq.backends.spanner.not_found.queue_exists`).
        self.existing_queues: set[str] = set()
        self._specs: dict[str, QueueSpec] = {}
        self._calls: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = False
        # Commits here wake this process's waiters at once; other processes' are seen
        # by re-reading every commit_poll_interval s (no change stream is used).
        self._commits = Notifier()
        self.commit_poll_interval: float | None = 0.5

    @property
    def url(self) -> str:
        return self._url

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- queues and DDL ------------------------------------------------------------

    def create_queue(self, spec: QueueSpec) -> None:
        """Register the queue; with ``ddl=auto`` also create it (``agentq init`` does
        that for every queue in one schema change)."""
        existing = self._specs.get(spec.name)
        if existing is not None and existing != spec:
            raise ConfigError(f"queue {spec.name!r} already exists with a different spec")
        check_new_queue_name(spec.name, self._specs)
        self._ddl([spec])  # validates what Spanner cannot express
        self._specs[spec.name] = spec
        if self.auto_ddl:
            self.apply_ddl([spec])

    def ddl(self) -> list[str]:
        """DDL for every registered queue and the runtime's table."""
        return self._ddl(sorted(self._specs.values(), key=lambda s: s.name))

    def _ddl(self, specs: Sequence[QueueSpec]) -> list[str]:
        return ddl(specs, postgres=self.dialect.postgres, namespace=self.dialect.namespace)

    def apply_ddl(self, specs: Sequence[QueueSpec] | None = None, timeout: float = 600) -> None:
        """Apply the DDL with ``update_ddl`` and wait for the operation."""
        statements = self._ddl(specs) if specs is not None else self.ddl()
        had = self._columns_before_ddl()
        try:
            self.database.update_ddl(statements).result(timeout)
        except concurrent.futures.TimeoutError as exc:
            raise BackendUnavailable(
                f"applying DDL at {self.endpoint}: the schema change did not finish within "
                f"{timeout:g} s (it may still be running)"
            ) from exc
        except API_ERRORS as exc:
            raise api_error(exc, "applying DDL", self.endpoint) from exc
        self._fill_after_ddl(had)
        applied = list(specs) if specs is not None else list(self._specs.values())
        for spec in applied:  # IF NOT EXISTS left a queue of another shape as it was
            check_shape(self, spec)
        record_specs(self, applied)

    def check_queue_shapes(self, queues: Sequence[str]) -> None:
        """Raise :class:`~agentq.errors.ConfigError` if a queue in the database has
        another shape than its spec (a worker checks its queues when it starts)."""
        for name in queues:
            try:
                spec = self.queue_spec(name)
            except QueueNotFound:
                continue  # not created yet: nothing to compare
            check_shape(self, spec)

    def queue_spec(self, name: str) -> QueueSpec:
        """The spec of a queue declared here or recorded in the database by ``init``."""
        spec = self._specs.get(name)
        if spec is None:
            validate_identifier(name, "queue name")
            spec = stored_specs(self).get(name)
        if spec is None:
            raise QueueNotFound(
                f"queue {name!r} is neither declared here nor recorded in the database "
                "(run `agentq init`)"
            )
        return spec

    def queues(self) -> list[str]:
        """Queues declared here and those ``agentq init`` recorded in the database."""
        return sorted(set(self._specs) | set(stored_specs(self)))

    # -- transactions ---------------------------------------------------------------

    def _named_params(self, params: Sequence[Any] | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(params, Mapping):
            return dict(params)
        if not params:
            return {}
        if self.dialect.postgres:
            return {f"p{i}": v for i, v in enumerate(params, start=1)}
        raise ConfigError("GoogleSQL takes named parameters: pass a dict for @name placeholders")

    def transact(
        self, fn: Callable[[Transaction], T], *, durable: bool = True, fenced: bool = False
    ) -> T:
        # Every Spanner commit is durable and serializable; ``durable`` and
        # ``fenced`` are accepted for the contract.
        written: list[set[tuple[str, str]]] = []

        def body(tx: Transaction) -> T:
            result = fn(tx)
            # The run that commits is the last one (an abort re-runs the function).
            written[:] = [tx.written if isinstance(tx, SpannerTransaction) else set()]
            return result

        result = transact(self, body)
        self._commits.notify(written[0] if written else None)  # their readers only
        return result

    def subscribe_commits(self, wake: Wake, record: RecordTopic | None = None) -> None:
        self._commits.subscribe(wake, record)

    def unsubscribe_commits(self, wake: Wake) -> None:
        self._commits.unsubscribe(wake)

    # -- receiving ------------------------------------------------------------------

    def stream(
        self, queue: str, max_batch_size: int = 1, max_duration: float = 0.0
    ) -> ReceiveStream:
        """Batches of leased messages (see :mod:`.receiving`); the stream's
        ``cancel()`` ends it from another thread."""
        check_stream_args(max_batch_size, max_duration)
        spec = self.queue_spec(queue)
        return ReceiveStream(self, spec, max_batch_size, max_duration)

    def track_call(self, call: Any) -> None:
        """Remember an open RPC so :meth:`close` can cancel it."""
        with self._lock:
            self._calls.add(call)

    def untrack_call(self, call: Any) -> None:
        """Forget an RPC that ended."""
        with self._lock:
            self._calls.discard(call)

    def sizing_warnings(self, queues: Sequence[str]) -> list[str]:
        """Documented Spanner limits a worker serving ``queues`` would exceed
        (see :mod:`.sizing`); the worker logs them when it starts."""
        return sizing_warnings(queues, self.receive_duration)

    def renew(self, queue: str, tokens: Sequence[str]) -> list[Renewal]:
        self.queue_spec(queue)
        return renew_leases(self, queue, tokens)

    # -- inspection and records -----------------------------------------------------------

    def stats(self, queue: str) -> QueueStats:
        """Depth, ready and scheduled from the queue table (see :mod:`.inspection`)."""
        return queue_stats(self, self.queue_spec(queue))

    def record_count(self, table: str, *, owner: str | None = None) -> int:
        return records.record_count(self, table, owner)

    def read_tallies(
        self, first_minute: int, end_minute: int, *, width: int = 1, owner: str | None = None
    ) -> list[Tally]:
        return records.read_tallies(self, first_minute, end_minute, width, owner)

    def delete_tallies(self, before_minute: int) -> int:
        return records.delete_tallies(self, before_minute)

    def compact_tallies(self, before_minute: int) -> int:
        return records.compact_tallies(self, before_minute)

    def message_keys(self, queue: str, *, delivered: bool = False) -> list[tuple[Any, ...]]:
        # Spanner's queues keep their leases to themselves: every key, delivered or not.
        return records.message_keys(self, self.queue_spec(queue))

    def message_count(self, queue: str, at_most: int, *, delivered: bool = False) -> int:
        # As message_keys: every message counts as delivered.
        return records.message_count(self, self.queue_spec(queue), at_most)

    def undelivered_backlog(
        self, queue: str, *, owner: str | None = None, oldest: bool = True
    ) -> list[BacklogGroup]:
        self.queue_spec(queue)  # an unknown queue is refused, as on the others
        return []  # as message_keys: every message counts as delivered

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        return records.get_record(self, table, key)

    def read_records(self, table: str, keys: Sequence[str]) -> dict[str, StoredRecord]:
        return records.read_records(self, table, keys)

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
        return records.list_records(
            self, table, prefix, limit, after, descending=descending, where=where
        )

    def reclaim_space(self, max_bytes: int, *, keep_free: float = 0.0) -> int:
        """Nothing to do: Spanner reclaims deleted rows' storage itself (after
        its version GC period, typically an hour)."""
        return 0

    def close(self) -> None:
        """Cancel open RECEIVE calls and close the client without blocking: the
        library's ``Database.close`` can wait up to 10 minutes for a maintenance
        thread, so it runs in a daemon thread with a short join."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call.cancel()
        closer = threading.Thread(
            target=self.database.close, name="agentq-spanner-close", daemon=True
        )
        closer.start()
        closer.join(2.0)
        # The client's gRPC channels (data and admin API): left open, a process
        # that opens and closes runtimes keeps one pair per open.
        for close_channel in self.channel_closers:
            try:
                close_channel()
            except Exception as exc:  # closing is best effort; nothing depends on it
                log.debug("closing a Spanner channel failed: %r", exc)

    def __repr__(self) -> str:
        return f"SpannerBackend({self._url!r})"
