"""The embedded SQLite backend (the default).

Spanner-queue semantics on one SQLite file (WAL, ``synchronous=FULL`` by
default, every write in ``BEGIN IMMEDIATE``). Where to find what:

* :mod:`.backend` -- :class:`SQLiteBackend`, the contract put together, and
  :func:`open_sqlite` (the ``sqlite:///`` URL and its options).
* :mod:`.connection` -- the connection, its pragmas and why, the write path:
  BEGIN IMMEDIATE, retries on BUSY, group commit (threads queued for the
  connection share one COMMIT, each in a savepoint).
* :mod:`.writer_lock` -- the file lock beside the database that makes agentq
  processes take turns at the write lock.
* :mod:`.files` -- the mode of the files it creates (0600 unless relaxed).
* :mod:`.driver_errors` -- which sqlite3 error becomes which agentq error.
* :mod:`.queues` -- a queue's table, DDL and prepared SQL; the stored specs.
* :mod:`.leases` -- leasing, renewal, TTL drops, counters, stats (tokens and
  the lease arithmetic shared with PostgreSQL: :mod:`agentq.backends.lease_rows`).
* :mod:`.transaction` -- the ``tx`` of ``transact``: send, ack, records, SQL.
* :mod:`.records` -- the runtime's records table.
* :mod:`.watcher` -- how waiting receivers wake: an in-process notification,
  and across processes an inotify watch of the doorbell and the WAL file (or
  an adaptive check of the WAL).
* :mod:`.waiters` -- whom another process's commit wakes: the readers whose
  record it changed, the receivers of the queues it concerns.
* :mod:`.doorbell` -- the ``-bell`` file a commit that sent messages rings,
  slot per queue, so other processes' receivers of those queues wake.

Task ids grow with time on this backend (``ordered_keys``): tasks enqueued
together share B-tree pages, so claiming or completing a batch rewrites a few
pages rather than one per task.
"""

from __future__ import annotations

from agentq.backends.sqlite.backend import SQLiteBackend, open_sqlite

__all__ = ["SQLiteBackend", "open_sqlite"]
