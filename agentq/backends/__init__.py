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
    BacklogGroup,
    EncodedFields,
    EncodedRecord,
    LeaseClaim,
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
    "BacklogGroup",
    "EncodedFields",
    "EncodedRecord",
    "LeaseClaim",
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
    ``redelivery``, ``busy_timeout``, ``poll_interval``, ``file_mode``,
    ``lease_seconds``; for PostgreSQL: ``redelivery``, ``ttl_sweep_interval``,
    ``lease_seconds``). ``lease_seconds`` (also a SQLite or PostgreSQL URL
    option) is how long a lease lasts, 10 s by default; Spanner's is fixed.
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
        spanner = _backend_module(
            "agentq.backends.spanner.connect", "Spanner", "google-cloud-spanner", "spanner"
        )
        backend: Backend = spanner.open_spanner(url, clock, options)
        return backend
    if scheme in ("postgresql", "postgres"):
        # The module itself, not the package: the package imports it (and psycopg)
        # only on first use, which would get past the check of the extra.
        postgres = _backend_module(
            "agentq.backends.postgres.backend", "PostgreSQL", "psycopg 3 and psycopg-pool",
            "postgres",
        )  # fmt: skip
        pg: Backend = postgres.open_postgres(url, clock, options)
        return pg
    raise ConfigError(
        f"unknown database URL scheme {scheme!r} in {url!r} (known: sqlite, postgresql, spanner)"
    )


def _backend_module(module: str, name: str, driver: str, extra: str) -> Any:
    """Import a backend's module, which imports its driver: a missing driver is
    :class:`MissingExtra` naming ``extra``; a missing agentq module, a build
    without that backend."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("agentq"):
            raise ConfigError(f"this agentq build has no {name} backend") from exc
        raise MissingExtra.needed_by(f"the {name} backend ({driver})", extra, exc.name) from exc
