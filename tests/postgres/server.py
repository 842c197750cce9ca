"""A real PostgreSQL server for the tests: one fresh database per test.

The server is named by ``AGENTQ_TEST_POSTGRES_URL`` (a role that may
``CREATE DATABASE``; ``.ci/run`` starts a throwaway cluster and sets it). Each
test that asks for :func:`postgres_url` gets a database of its own, created
from ``template0`` and dropped (``WITH (FORCE)``) after the test, so tests share
nothing and may run in parallel workers.

Without the variable, or with a server that does not answer, the PostgreSQL
cases skip with the reason; with ``CI`` set they fail instead, so a CI run
that lost its server cannot pass by skipping.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

__all__ = [
    "BACKENDS",
    "ENV",
    "DatabaseFactory",
    "as_role",
    "database_url",
    "postgres_url",
    "postgres_url_factory",
]

ENV = "AGENTQ_TEST_POSTGRES_URL"
_counter = itertools.count()
_unreachable: dict[str, str] = {}  # server URL -> why (checked once per process)


def _absent(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but PostgreSQL is not available: {reason}", pytrace=False)
    pytest.skip(f"postgres: {reason}")


def _admin_connect(url: str) -> object:
    psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def as_role(url: str, role: str) -> str:
    """``url`` connecting as ``role`` (no password: the test server trusts it)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


class DatabaseFactory:
    """Creates databases on the test server and drops them all at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._admin = _admin_connect(url)
        self._made: list[str] = []
        self._roles: list[str] = []

    def create(self) -> str:
        """A new empty database; returns its URL."""
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        name = f"agentq_test_{os.getpid()}_{worker}_{next(_counter)}"
        self._admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')  # type: ignore[attr-defined]
        self._made.append(name)
        return _with_database(self.url, name)

    def create_role(self) -> str:
        """A new login role without superuser or CREATEDB (cluster-wide: dropped
        after the databases)."""
        name = f"agentq_role_{os.getpid()}_{next(_counter)}"
        self._admin.execute(f'CREATE ROLE "{name}" LOGIN')  # type: ignore[attr-defined]
        self._roles.append(name)
        return name

    def admin(self, database_url: str) -> object:
        """An autocommit admin connection to one of the test databases."""
        return _admin_connect(_with_database(self.url, urlsplit(database_url).path.lstrip("/")))

    def close(self) -> None:
        try:
            for name in self._made:
                self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
            for role in self._roles:
                self._admin.execute(f'DROP ROLE IF EXISTS "{role}"')  # type: ignore[attr-defined]
        finally:
            self._admin.close()  # type: ignore[attr-defined]


@pytest.fixture
def postgres_url_factory() -> Iterator[DatabaseFactory]:
    """Makes fresh databases on the test server (skips, or fails under CI, without one)."""
    url = os.environ.get(ENV, "")
    if not url:
        _absent(f"set {ENV} to a PostgreSQL server URL (a role with CREATEDB) to run these")
    if url in _unreachable:
        _absent(_unreachable[url])
    try:
        factory = DatabaseFactory(url)
    except pytest.skip.Exception:
        raise
    except Exception as exc:  # psycopg.OperationalError, named below
        _unreachable[url] = f"no server answers at {ENV}: {str(exc).splitlines()[0]}"
        _absent(_unreachable[url])
        raise  # unreachable: _absent raised
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def postgres_url(postgres_url_factory: DatabaseFactory) -> str:
    """The URL of a fresh database for this test."""
    return postgres_url_factory.create()


#: The backends of the suites parametrised by :func:`database_url`.
BACKENDS = ["sqlite", "postgresql"]


def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_only: Mapping[str, str]
) -> str:
    """A fixture body for ``params=BACKENDS``: a SQLite file in ``tmp_path``, or a
    fresh PostgreSQL database. A test named in ``sqlite_only`` (by its function or
    its module's file name) is skipped on PostgreSQL with the reason given there."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'agentq.db'}"
    reason = sqlite_only.get(request.node.originalname) or sqlite_only.get(request.node.path.name)
    if reason:
        pytest.skip(f"postgresql: {reason}")
    return str(request.getfixturevalue("postgres_url"))


def end_sessions_at_commit(admin: Any, table: str) -> None:
    """Make ``table`` (created here) end the session of any transaction that
    inserted into it, inside that transaction's COMMIT: a deferred constraint
    trigger that terminates its own backend. What a connection lost during the
    COMMIT looks like to the client (``admin``: an autocommit connection)."""
    admin.execute(f"CREATE TABLE {table} (id int)")
    admin.execute(
        "CREATE OR REPLACE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$"
    )
    admin.execute(
        f"CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON {table} "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_session()"
    )
