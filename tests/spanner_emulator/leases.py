"""The interposer's queue model: leases on a queue's backing table.

Leasing, renewing and waiting run as transactions and strong reads on the
emulator, through a google-cloud-spanner client of their own. A lease is four
columns of the backing row (``emu_lease_token``, ``emu_lease_expiry``,
``emu_visible_at``, ``emu_deliveries``); tokens are also kept here, so that an
acknowledged message's unexpired token can still be answered (NULL new token).
Lease length and backoff are the stand-in's own (:mod:`.timekeeping`); what the
documents leave open (batch shapes, order, the backoff's curve) is drawn per
database (:mod:`.choices`).
Part of the stand-in to delete with ``interposer.py``.
"""

from __future__ import annotations

import collections
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.cloud.spanner_v1 import param_types
from google.cloud.spanner_v1.keyset import KeySet
from google.cloud.spanner_v1.types import type as type_pb

from .choices import WINDOW, Choices
from .queue_sql import QueueDef
from .timekeeping import LEASE_SECONDS, QueueClock, RealClock, is_real

_Code = type_pb.TypeCode
_LEASE = timedelta(seconds=LEASE_SECONDS)
_TOKEN = "emu-lease-"


@dataclass
class _Lease:
    database: str
    queue: str
    key: list[Any]
    expiry: datetime


class Leases:
    """Leases of every queue the interposer knows, one clock per database."""

    def __init__(self, client: Any) -> None:
        self._client = client  # talks to the emulator directly
        self.clocks: dict[str, QueueClock] = {}
        self._leases: dict[str, _Lease] = {}
        self._waiters: dict[str, set[threading.Event]] = {}
        self._databases: dict[str, Any] = {}
        self._lock = threading.Lock()
        #: Labels of databases (their test's id), for their :class:`Choices`.
        self.labels: dict[str, str] = {}
        self._choices: dict[str, Choices] = {}
        #: The documented ``lease_expiration_count`` metric, by (database, queue).
        self.expirations: collections.Counter[tuple[str, str]] = collections.Counter()

    def clock(self, db: str) -> QueueClock:
        return self.clocks.get(db) or RealClock()

    def wake(self, db: str) -> None:
        """A commit landed: every RECEIVE waiting on this database looks again."""
        with self._lock:
            waiters = list(self._waiters.get(db, ()))
        for wake in waiters:
            wake.set()

    def forget(self, db: str) -> None:
        with self._lock:
            self.clocks.pop(db, None)
            self._waiters.pop(db, None)
            self._leases = {t: v for t, v in self._leases.items() if v.database != db}
            self._choices.pop(db, None)
            self.labels.pop(db, None)
            for key in [k for k in self.expirations if k[0] == db]:
                del self.expirations[key]
            database = self._databases.pop(db, None)
        if database is not None:
            threading.Thread(target=database.close, daemon=True).start()

    def database(self, db: str, postgres: bool) -> Any:
        """The interposer's own handle on a database of the emulator (cached)."""
        from google.cloud.spanner_admin_database_v1 import DatabaseDialect

        with self._lock:
            if db not in self._databases:
                parts = db.split("/")
                dialect = (
                    DatabaseDialect.POSTGRESQL if postgres else DatabaseDialect.GOOGLE_STANDARD_SQL
                )
                self._databases[db] = self._client.instance(parts[3]).database(
                    parts[5], database_dialect=dialect
                )
            return self._databases[db]

    def _params(self, q: QueueDef, names: list[str], values: list[Any], types: list[Any]) -> Any:
        keys = [f"p{i}" for i in range(1, len(names) + 1)] if q.postgres else names
        marks = (
            [f"${i}" for i in range(1, len(names) + 1)] if q.postgres else [f"@{n}" for n in names]
        )
        return marks, dict(zip(keys, values, strict=True)), dict(zip(keys, types, strict=True))

    def lease(
        self, db: str, q: QueueDef, batch: int, wanted: Callable[[], bool] = lambda: True
    ) -> list[tuple[list[Any], str, datetime]]:
        """Lease a batch of ready messages, chosen as :class:`.choices.Choices` says:
        of one split, in no particular order, up to ``batch`` of them. Nothing is
        leased once ``wanted()`` says the RECEIVE was cancelled meanwhile."""
        now = self.clock(db).now()
        (mark,), params, types = self._params(q, ["now"], [now], [param_types.TIMESTAMP])
        payload = (
            q.payload
            if q.payload_code != _Code.JSON
            else q.col(f"TO_JSON_STRING({q.payload})", f"CAST({q.payload} AS varchar)")
        )
        sql = (
            f"SELECT {', '.join(q.keys)}, {payload}, {q.deliver}, emu_deliveries FROM {q.name} "
            f"WHERE {q.deliver} <= {mark} AND (emu_visible_at IS NULL OR emu_visible_at <= {mark}) "
            f"ORDER BY {q.deliver} LIMIT {WINDOW}"
        )
        database = self.database(db, q.postgres)
        with database.snapshot() as snap:  # a read first: no write lock when nothing is ready
            if not list(snap.execute_sql(sql, params=params, param_types=types)):
                return []
        choices, nkeys = self.choices(db), len(q.keys)

        def take(txn: Any) -> list[tuple[list[Any], str, datetime, bool]]:
            ready = list(txn.execute_sql(sql, params=params, param_types=types))
            chosen = choices.batch(ready, [r[:nkeys] for r in ready], batch)
            if not wanted():
                return []  # cancelled while it looked: nothing leased
            out = []
            for row in chosen:
                n, deliver, expiry = (row[-1] or 0) + 1, row[-2], now + _LEASE
                visible = expiry + timedelta(
                    seconds=choices.redelivery_delay(n, (expiry - deliver).total_seconds())
                )
                token = _TOKEN + secrets.token_hex(12)
                txn.update(
                    q.name,
                    [
                        *q.keys,
                        "emu_lease_token",
                        "emu_lease_expiry",
                        "emu_visible_at",
                        "emu_deliveries",
                    ],
                    [[*row[:nkeys], token, expiry, visible, n]],
                )
                out.append((list(row[:-1]), token, expiry, n > 1))
            return out

        leased: list[tuple[list[Any], str, datetime, bool]] = database.run_in_transaction(
            take, default_retry_delay=0.01
        )
        with self._lock:
            for row, token, expiry, again in leased:
                self._leases[token] = _Lease(db, q.name, row[:nkeys], expiry)
                if again:  # delivered before, never acked: that lease expired
                    self.expirations[(db, q.name.lower())] += 1
        return [(row, token, expiry) for row, token, expiry, _ in leased]

    def choices(self, db: str) -> Choices:
        """This database's draw (see :mod:`.choices`), labelled by its test if known."""
        with self._lock:
            if db not in self._choices:
                self._choices[db] = Choices(self.labels.get(db, db))
            return self._choices[db]

    def leased_count(self, db: str, q: QueueDef) -> int:
        """Messages of ``q`` whose lease has not expired (on the queue's clock)."""
        (mark,), params, types = self._params(
            q, ["now"], [self.clock(db).now()], [param_types.TIMESTAMP]
        )
        sql = f"SELECT COUNT(*) FROM {q.name} WHERE emu_lease_expiry > {mark}"
        with self.database(db, q.postgres).snapshot() as snap:
            return int(next(iter(snap.execute_sql(sql, params, types)))[0])

    def next_change(self, db: str, q: QueueDef) -> datetime | None:
        """When a message not leasable now becomes so (delivery time or lease end);
        now if one is leasable already."""
        now = self.clock(db).now()
        (mark,), params, types = self._params(q, ["now"], [now], [param_types.TIMESTAMP])
        ready = f"{q.deliver} <= {mark} AND (emu_visible_at IS NULL OR emu_visible_at <= {mark})"
        sql = (
            f"SELECT (SELECT MIN({q.deliver}) FROM {q.name} WHERE {q.deliver} > {mark}), "
            f"(SELECT MIN(emu_visible_at) FROM {q.name} WHERE emu_visible_at > {mark}), "
            f"(SELECT COUNT(*) FROM {q.name} WHERE {ready})"
        )
        with self.database(db, q.postgres).snapshot() as snap:
            *times, count = next(iter(snap.execute_sql(sql, params, types)))
        if count:
            return now
        return min((t for t in times if t is not None), default=None)

    def wait(self, db: str, q: QueueDef, until_mono: float, context: Any) -> None:
        """Wait on the queue's clock until a commit, the next delivery or lease end,
        the RECEIVE's end, or the client's cancel, whichever comes first."""
        clock, wake = self.clock(db), threading.Event()
        context.add_callback(wake.set)
        with self._lock:
            self._waiters.setdefault(db, set()).add(wake)
        try:
            change = self.next_change(db, q)
            timeout = until_mono - clock.monotonic()
            if change is not None:
                timeout = min(timeout, (change - clock.now()).total_seconds())
            if is_real(clock):
                wake.wait(min(timeout, 1.0))  # 1 s: also notice rows written by DML
                return
            # A test's FakeClock: poll it in real time instead of sleeping on it, so
            # that its sleeper count stays the application's (a RECEIVE waits on the
            # server, where the client's clock does not see it).
            until = clock.monotonic() + timeout
            while clock.monotonic() < until and not wake.is_set() and context.is_active():
                wake.wait(0.002)
        finally:
            with self._lock:
                self._waiters.get(db, set()).discard(wake)

    def renew(
        self, db: str, q: QueueDef, tokens: list[str]
    ) -> list[tuple[str, str | None, datetime]]:
        now = self.clock(db).now()
        with self._lock:
            leases = [(t, self._leases.get(t)) for t in tokens]
        live = [
            (t, lease)
            for t, lease in leases
            if lease and lease.database == db and lease.queue == q.name and lease.expiry > now
        ]

        def renew_all(txn: Any) -> list[tuple[str, str | None, datetime, _Lease]]:
            out: list[tuple[str, str | None, datetime, _Lease]] = []
            for token, lease in live:
                rows = list(
                    txn.read(
                        q.name,
                        ["emu_lease_token", q.deliver, "emu_deliveries"],
                        KeySet(keys=[lease.key]),
                    )
                )
                if not rows or rows[0][0] != token:  # acked (or acked and sent again)
                    out.append((token, None, lease.expiry, lease))
                    continue
                new, expiry = _TOKEN + secrets.token_hex(12), now + _LEASE
                visible = expiry + timedelta(
                    seconds=self.choices(db).redelivery_delay(
                        rows[0][2] or 1, (expiry - rows[0][1]).total_seconds()
                    )
                )
                txn.update(
                    q.name,
                    [*q.keys, "emu_lease_token", "emu_lease_expiry", "emu_visible_at"],
                    [[*lease.key, new, expiry, visible]],
                )
                out.append((token, new, expiry, _Lease(db, q.name, lease.key, expiry)))
            return out

        if not live:
            return []
        renewed = self.database(db, q.postgres).run_in_transaction(
            renew_all, default_retry_delay=0.01
        )
        with self._lock:
            for _, new, _, lease in renewed:
                if new is not None:
                    self._leases[new] = lease
        return [(old, new, expiry) for old, new, expiry, _ in renewed]
