"""PostgreSQL's errors become agentq errors that name what failed: a missing
role, a schema the role may not create, serialization failures and deadlocks
(retried, then surfaced), a statement timeout, an exhausted pool."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import Transaction, open_backend
from agentq.errors import (
    BackendUnavailable,
    ConfigError,
    DatabaseNotWritable,
    TransactionAborted,
    TransactionError,
)
from agentq.spec import QueueSpec
from tests.postgres.server import DatabaseFactory, as_role


def _raise(code: str) -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{code}'; END $$"


def test_an_unknown_role_is_an_authentication_error(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="authentication failed"):
        open_backend(as_role(postgres_url, "no_such_role_agentq"))


def test_a_role_that_may_not_create_the_schema_gets_permission_denied_naming_it(
    postgres_url_factory: DatabaseFactory,
) -> None:
    url = postgres_url_factory.create()
    role = postgres_url_factory.create_role()
    with pytest.raises(DatabaseNotWritable, match=r"permission denied while creating schema"):
        open_backend(as_role(url, role))


def test_a_role_with_only_create_on_its_schema_runs_queues_and_records(
    postgres_url_factory: DatabaseFactory,
) -> None:
    url = postgres_url_factory.create()
    role = postgres_url_factory.create_role()
    admin: Any = postgres_url_factory.admin(url)
    try:
        admin.execute("CREATE SCHEMA agentq")
        admin.execute(f'GRANT USAGE, CREATE ON SCHEMA agentq TO "{role}"')
    finally:
        admin.close()
    b = open_backend(as_role(url, role))
    try:
        b.create_queue(QueueSpec.simple("Jobs"))
        b.transact(lambda tx: (tx.send("Jobs", "1", b"x"), tx.put_record("ledger", "k", {"n": 1})))
        assert [m.key for batch in b.stream("Jobs") for m in batch] == [("1",)]
        assert b.get_record("ledger", "k") == {"n": 1}
    finally:
        b.close()


@pytest.mark.parametrize("code", ["40001", "40P01"], ids=["serialization", "deadlock"])
def test_transient_conflicts_rerun_the_function(postgres_url: str, code: str) -> None:
    b = open_backend(postgres_url)
    runs = []

    def fn(tx: Transaction) -> None:
        runs.append(1)
        tx.put_record("ledger", "k", {"run": len(runs)})
        if len(runs) < 3:
            tx.execute(_raise(code))

    try:
        b.transact(fn)
        assert len(runs) == 3
        assert b.get_record("ledger", "k") == {"run": 3}  # only the last run committed
    finally:
        b.close()


@pytest.mark.parametrize(
    ("code", "name"), [("40001", "serialization failure"), ("40P01", "deadlock")]
)
def test_conflicts_that_persist_surface_as_transaction_aborted(
    postgres_url: str, code: str, name: str
) -> None:
    b = open_backend(postgres_url)
    try:
        with pytest.raises(TransactionAborted, match=rf"\({name}\), retries ran out"):
            b.transact(lambda tx: tx.execute(_raise(code)))
    finally:
        b.close()


def test_a_statement_timeout_is_named(postgres_url: str) -> None:
    b = open_backend(postgres_url)

    def slow(tx: Transaction) -> None:
        tx.execute("SET LOCAL statement_timeout = '20ms'")
        tx.execute("SELECT pg_sleep(5)")

    try:
        with pytest.raises(TransactionError, match="statement_timeout"):
            b.transact(slow)
    finally:
        b.close()


def test_an_exhausted_pool_is_named_with_its_size(postgres_url: str) -> None:
    b = open_backend(postgres_url + "?pool_size=1&pool_timeout=0.2")
    try:
        with pytest.raises(BackendUnavailable, match=r"no pooled connection.*pool_size=1"):
            # The outer transaction holds the only connection.
            b.transact(lambda tx: b.transact(lambda inner: inner.execute("SELECT 1")))
    finally:
        b.close()


def test_application_sql_takes_psycopg_placeholders(postgres_url: str) -> None:
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: tx.execute("CREATE TABLE orders (id bigint PRIMARY KEY, s text)"))
        b.transact(lambda tx: tx.execute("INSERT INTO orders VALUES (%s, %s)", (1, "100% new")))
        rows = b.transact(
            lambda tx: tx.execute("SELECT s FROM orders WHERE id = %(id)s", {"id": 1})
        )
        assert rows == [("100% new",)]
        # No parameters: a literal % needs no escaping.
        assert b.transact(lambda tx: tx.execute("SELECT '5%'")) == [("5%",)]
    finally:
        b.close()


def test_a_missing_database_is_named(postgres_url: str) -> None:
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_database_agentq"
    with pytest.raises(ConfigError, match="the database does not exist"):
        open_backend(missing)
