"""Where a chaos run keeps its data: one SQLite file, a throwaway PostgreSQL
cluster (which the run restarts), or the Spanner emulator behind the queue
stand-in. :func:`open_target` makes one; ``close`` removes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from agentq import Runtime
from tests.chaos.appsql import BACKENDS, sqlite_pg_schema

__all__ = ["Target", "open_target"]


#: Spanner's lease (the queue documents: 10 s).
_LEASE = 10.0


class Target(Protocol):
    """A database for one run."""

    kind: str
    url: str  # the controller's, which creates agentq's tables and queues
    worker_url: str  # the workers'
    #: Seconds the settle phase waits at least: a message whose lease expired
    #: comes back after the backend's redelivery backoff, however long that is.
    settle_floor: float

    def create_app_tables(self, rt: Runtime) -> None:
        """The orders and refund_commits tables (:mod:`tests.chaos.appsql`)."""
        ...

    def restart(self, mode: str, down_seconds: float) -> None:
        """Stop the database server (``fast`` or ``immediate``) and start it again."""
        ...

    def close(self) -> None: ...


class _Sqlite:
    kind = "sqlite"
    settle_floor = 0.0  # agentq's own backoff, covered by the run's settle_seconds

    def __init__(self, workdir: Path) -> None:
        self.url = self.worker_url = f"sqlite:///{workdir / 'chaos.db'}"

    def create_app_tables(self, rt: Runtime) -> None:
        rt.backend.transact(lambda tx: [tx.execute(s) for s in sqlite_pg_schema(self.kind)])

    def restart(self, mode: str, down_seconds: float) -> None:
        raise NotImplementedError("an embedded SQLite file has no server to restart")

    def close(self) -> None:
        pass


class _Postgres(_Sqlite):
    kind = "postgresql"

    def __init__(self, workdir: Path) -> None:
        from tests.chaos.pgcluster import PgCluster

        self.cluster = PgCluster()
        self.url = self.worker_url = self.cluster.url

    def restart(self, mode: str, down_seconds: float) -> None:
        self.cluster.restart(mode, down_seconds)

    def close(self) -> None:
        self.cluster.close()


class _Spanner:
    kind = "spanner"

    def __init__(self, workdir: Path) -> None:
        from tests.chaos.spanner_standin import SpannerStandIn

        self.standin = SpannerStandIn()
        # The stand-in draws its backoff ceiling per database (up to 15 minutes, within
        # the documents' "first hour"): a message killed often enough waits that long.
        self.settle_floor = self.standin.redelivery_ceiling + _LEASE + 60.0
        self.url = self.standin.url  # ddl=auto: the controller creates the queues once
        # Workers open the database as deployed ones do after `agentq init`: without
        # schema changes, which the emulator refuses beside a read-write transaction.
        self.worker_url = self.url.replace("&ddl=auto", "")

    def create_app_tables(self, rt: Runtime) -> None:
        pass  # made through the admin API with the database (spanner_standin)

    def restart(self, mode: str, down_seconds: float) -> None:
        raise NotImplementedError("the run does not restart the Spanner emulator")

    def close(self) -> None:
        self.standin.close()


def open_target(kind: str, workdir: Path) -> Target:
    """A fresh database of ``kind`` (one of :data:`~tests.chaos.appsql.BACKENDS`)."""
    makers = {"sqlite": _Sqlite, "postgresql": _Postgres, "spanner": _Spanner}
    if kind not in makers:
        raise ValueError(f"unknown backend {kind!r} (known: {', '.join(BACKENDS)})")
    target: Target = makers[kind](workdir)
    return target
