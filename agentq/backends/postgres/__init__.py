"""The PostgreSQL backend (``postgresql://``, extra ``agentq-runtime[postgres]``).

Spanner-queue semantics in the database most applications already have, so
the agent's state change and its tool tasks commit in one transaction with the
application's own rows. Where to find what:

* :mod:`.backend` -- :class:`PostgresBackend`, the contract put together, and
  :func:`open_postgres`.
* :mod:`.config` -- the URL and agentq's options in it (schema, pool size,
  pooler).
* :mod:`.connection` -- the pool, the write path, retries on serialization
  failures and deadlocks.
* :mod:`.pool` -- psycopg-pool's pool, its waits between reconnection
  attempts capped, and the one line that says how long an outage lasted.
* :mod:`.driver_errors` -- which psycopg error becomes which agentq error.
* :mod:`.schema` -- agentq's schema, its version table and migrations.
* :mod:`.queues` -- a queue's table, DDL and prepared SQL; the stored specs.
* :mod:`.leases` -- leasing (``FOR UPDATE SKIP LOCKED``), renewal, TTL drops,
  counters, stats (tokens and the lease arithmetic shared with SQLite:
  :mod:`agentq.backends.lease_rows`).
* :mod:`.statistics` -- planner statistics for tables that outgrew them.
* :mod:`.transact` -- ``transact``: the function's own connection or a commit
  group, re-runs after a failed guess, notifications once committed.
* :mod:`.grouping` -- group commit among one process's conflicting threads.
* :mod:`.pipeline` -- one transaction's connection: what needs no answer goes
  with the next statement that does; :mod:`.inline`, statements as one text,
  their parameters bound by the client; :mod:`.prepared`, the hot statements
  among them prepared once per connection; :mod:`.checks`, the checks sent
  with the next round trip instead of read first.
* :mod:`.transaction` -- the ``tx`` of ``transact``: send, ack, records, SQL.
* :mod:`.placeholders` -- SQLite's ``?`` in the application's SQL.
* :mod:`.bound` -- a ``tx`` on the application's own connection
  (``Runtime.decision(conn)``).
* :mod:`.records` -- the runtime's records table; :mod:`.record_rows`, its
  keys, texts, merged fields and compare-and-swap rows.
* :mod:`.totals`, :mod:`.owners`, :mod:`.tallies` -- the record counts, the
  owner column and its totals, the per-minute tallies of finished tasks.
* :mod:`.wakeups` -- ``LISTEN/NOTIFY`` and the bounded poll behind it.
* :mod:`.space` -- ``reclaim_space``: a plain ``VACUUM`` of the records table.

The URL parser (:mod:`.config`) and the DDL (:func:`.queues.ddl_statements`)
import without psycopg: ``agentq init --print-ddl`` needs neither a server nor
the extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentq.backends.postgres.backend import PostgresBackend, open_postgres

__all__ = ["PostgresBackend", "open_postgres"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the URL parser and the DDL (``init --print-ddl``) are
    # plain Python and need no psycopg.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("agentq.backends.postgres.backend"), name)
