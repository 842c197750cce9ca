"""The psycopg-pool pool under :class:`~agentq.backends.postgres.connection.Database`,
and how it reports an outage.

psycopg-pool replaces a lost connection in the background, waiting 1, 2, 4, 8 ...
seconds between failed attempts; uncapped, after an outage of T seconds its next
attempt came up to T seconds after the server was back (a 40 s restart left
every transaction failing for 19 s more). :class:`Pool` caps that wait at
:data:`_RECONNECT_MAX`. psycopg-pool warns at each failed attempt (the CLI
prints a line of them per interval, :mod:`agentq.logs`); once an attempt
succeeds again, :class:`ConnectionOutage` says in one line how long the
attempts failed and how many did (issue 42).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg_pool
from psycopg_pool.pool import AddConnection

__all__ = ["ConnectionOutage", "Pool"]

log = logging.getLogger("agentq.backends.postgres")

#: Longest wait between the pool's attempts to replace a lost connection.
_RECONNECT_MAX = 1.0


class ConnectionOutage:
    """The pool's attempts to connect that failed since the last one that
    succeeded: when one succeeds again, one WARNING line on
    ``agentq.backends.postgres`` says how long they failed (from the first
    failure, by ``clock``) and how many did."""

    def __init__(self, where: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.where = where
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._failed = 0

    @property
    def down_for(self) -> float | None:
        """Seconds since the first of the attempts to connect that have failed
        since the last that succeeded; None if the last one succeeded."""
        with self._lock:
            return None if self._since is None else self._clock() - self._since

    def failed(self) -> None:
        """An attempt to connect failed."""
        with self._lock:
            if self._since is None:
                self._since = self._clock()
            self._failed += 1

    def connected(self) -> None:
        """An attempt to connect succeeded."""
        with self._lock:
            if self._since is None:
                return
            gone, failed = self._clock() - self._since, self._failed
            self._since, self._failed = None, 0
        log.warning(
            "PostgreSQL at %s: connection back after %.1fs without one (%d failed attempt%s "
            "to connect)", self.where, gone, failed, "" if failed == 1 else "s",
        )  # fmt: skip


class Pool(psycopg_pool.ConnectionPool):
    """psycopg-pool's pool, its waits between reconnection attempts capped, its
    attempts to connect told to ``outage``.

    ``schedule_task`` is how the pool defers its next attempt to add a
    connection (``AddConnection``) after a failed one; other maintenance (the
    periodic shrink of idle connections) keeps its own schedule. The attempt's
    give-up time (``reconnect_timeout``) is unchanged. ``_connect`` makes each
    of the pool's connections. (Private hooks: the ``postgres`` extra pins
    psycopg-pool below 4, and tests check them.)"""

    def __init__(self, *args: Any, outage: ConnectionOutage, **kwargs: Any) -> None:
        self.outage = outage  # before the pool opens and connects
        super().__init__(*args, **kwargs)

    def schedule_task(self, task: Any, delay: float) -> None:
        if isinstance(task, AddConnection):
            delay = min(delay, _RECONNECT_MAX)
        super().schedule_task(task, delay)

    def _connect(self, timeout: float | None = None) -> Any:
        try:
            conn = super()._connect(timeout)
        except Exception:
            self.outage.failed()
            raise
        self.outage.connected()
        return conn
