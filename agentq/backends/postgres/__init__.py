"""The PostgreSQL backend (``postgresql://``, extra ``agentq[postgres]``).

Spanner-queue semantics in the database most applications already have, so
the agent's state change and its tool tasks commit in one transaction with the
application's own rows. Where to find what:

* :mod:`.backend` -- :class:`PostgresBackend`, the contract put together, and
  :func:`open_postgres`.
* :mod:`.config` -- the URL and agentq's options in it (schema, pool size).
* :mod:`.connection` -- the pool, the write path, retries on serialization
  failures and deadlocks.
* :mod:`.driver_errors` -- which psycopg error becomes which agentq error.
* :mod:`.schema` -- agentq's schema, its version table and migrations.
* :mod:`.queues` -- a queue's table, DDL and prepared SQL; the stored specs.
* :mod:`.leases` -- leasing (``FOR UPDATE SKIP LOCKED``), tokens, renewal,
  TTL drops, counters, stats.
* :mod:`.transaction` -- the ``tx`` of ``transact``: send, ack, records, SQL.
* :mod:`.records` -- the runtime's records table.
* :mod:`.wakeups` -- ``LISTEN/NOTIFY`` and the bounded poll behind it.
"""

from __future__ import annotations

from agentq.backends.postgres.backend import PostgresBackend, open_postgres

__all__ = ["PostgresBackend", "open_postgres"]
