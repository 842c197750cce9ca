"""Queue backends and the factory that picks one from a URL.

``sqlite:///path/to.db`` (the embedded default),
``postgresql://user@host:5432/db`` and
``spanner://projects/P/instances/I/databases/D``. Each backend module is imported
only when its URL is opened, so neither psycopg nor the Spanner client is loaded
for SQLite.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentq.backends.base import (
    LEASE_SECONDS,
    Backend,
    EncodedFields,
    EncodedRecord,
    Message,
    QueueStats,
    RedeliveryPolicy,
    Renewal,
    StoredRecord,
    Transaction,
    encode_fields,
    encode_record,
)
from agentq.clock import Clock
from agentq.errors import ConfigError, MissingExtra

__all__ = [
    "LEASE_SECONDS",
    "Backend",
    "EncodedFields",
    "EncodedRecord",
    "Message",
    "QueueStats",
    "RedeliveryPolicy",
    "Renewal",
    "StoredRecord",
    "Transaction",
    "encode_fields",
    "encode_record",
    "open_backend",
]


def open_backend(url: str, *, clock: Clock | None = None, **options: Any) -> Backend:
    """Open the backend named by ``url``.

    ``options`` are passed to the backend (for SQLite: ``durability``,
    ``redelivery``, ``busy_timeout``, ``poll_interval``, ``file_mode``).
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"invalid database URL {url!r}: expected sqlite:///path/to.db, "
            "postgresql://user@host:5432/db or spanner://projects/P/instances/I/databases/D"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        from agentq.backends.sqlite import open_sqlite

        return open_sqlite(url, clock, options)
    if scheme == "spanner":
        try:
            module = importlib.import_module("agentq.backends.spanner.connect")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("agentq"):
                raise ConfigError("this agentq build has no Spanner backend") from exc
            raise MissingExtra.needed_by(
                "the Spanner backend (google-cloud-spanner)", "spanner", exc.name
            ) from exc
        backend: Backend = module.open_spanner(url, clock, options)
        return backend
    if scheme in ("postgresql", "postgres"):
        try:
            module = importlib.import_module("agentq.backends.postgres")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("agentq"):
                raise ConfigError("this agentq build has no PostgreSQL backend") from exc
            raise MissingExtra.needed_by(
                "the PostgreSQL backend (psycopg 3 and psycopg-pool)", "postgres", exc.name
            ) from exc
        pg: Backend = module.open_postgres(url, clock, options)
        return pg
    raise ConfigError(
        f"unknown database URL scheme {scheme!r} in {url!r} (known: sqlite, postgresql, spanner)"
    )
