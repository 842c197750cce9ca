"""The postgresql:// URL (no server needed): agentq's options, the schema name,
and a password that never reaches ``Backend.url`` or an error message."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import open_backend
from agentq.backends.postgres.config import parse_url
from agentq.backends.postgres.schema import SCHEMA_VERSION, ddl
from agentq.errors import BackendUnavailable, ConfigError
from tests.ports import held_port


def test_agentq_options_are_taken_out_and_libpq_ones_kept() -> None:
    c = parse_url(
        "postgresql://app:s3cret@db.example:6432/shop?schema=jobs&pool_size=4&sslmode=require"
    )
    assert c.schema == "jobs"
    assert c.pool_size == 4
    assert "sslmode=require" in c.conninfo and "pool_size" not in c.conninfo
    assert "s3cret" in c.conninfo  # libpq needs it
    assert "s3cret" not in c.safe_url and c.safe_url.startswith("postgresql://app@db.example")
    assert c.where == "db.example:6432/shop"


def test_a_libpq_option_with_a_space_reaches_libpq_as_written() -> None:
    # urlencode's default spelled the space of "-c search_path=x" as "+", which
    # libpq's URL parser keeps: the server then refused "+search_path".
    from psycopg.conninfo import conninfo_to_dict

    c = parse_url("postgresql://localhost/db?schema=jobs&options=-c%20statement_timeout%3D5000")
    assert conninfo_to_dict(c.conninfo)["options"] == "-c statement_timeout=5000"
    assert "options=-c%20statement_timeout" in c.safe_url


def test_the_default_schema_is_agentq() -> None:
    assert parse_url("postgres://localhost/db").schema == "agentq"


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("schema=Agent-Q", "schema 'Agent-Q' is not a lowercase"),
        ("pool_size=0", "pool_size must be a number from 1"),
        ("pool_size=2.5", "pool_size must be a whole number"),
        ("pool_timeout=nan", "pool_timeout must be a number"),
    ],
)
def test_bad_options_are_named(query: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_url(f"postgresql://localhost/db?{query}")


def test_unknown_backend_option_is_named() -> None:
    with pytest.raises(ConfigError, match="durability"):
        open_backend("postgresql://localhost/db", durability="full")


def test_connection_refused_is_backend_unavailable_naming_it_without_the_password() -> None:
    with held_port() as port:  # held by this process, nothing listens on it
        url = f"postgresql://app:s3cret@127.0.0.1:{port}/db?connect_timeout=2"
        with pytest.raises(BackendUnavailable, match="connection refused") as info:
            open_backend(url)
    assert f"127.0.0.1:{port}/db" in str(info.value)
    assert "s3cret" not in str(info.value)


def test_ddl_creates_the_schema_and_records_its_version() -> None:
    statements = ddl("agentq")
    assert statements[0] == 'CREATE SCHEMA IF NOT EXISTS "agentq"'
    assert any('"agentq".records' in s for s in statements)
    assert statements[-1].endswith(f"VALUES ({SCHEMA_VERSION})")


@pytest.mark.parametrize("key", ["password", "sslpassword", "PASSWORD"])
def test_a_password_in_the_query_is_redacted_from_the_safe_url(key: str) -> None:
    c = parse_url(f"postgresql://app@db.example/shop?{key}=s3cret&sslmode=require&schema=jobs")
    assert f"{key}=s3cret" in c.conninfo  # libpq needs it (and reads what it knows)
    assert "s3cret" not in c.safe_url
    assert f"{key}=REDACTED" in c.safe_url and "sslmode=require" in c.safe_url
    assert "s3cret" not in repr(c)  # the working conninfo stays private
    with pytest.raises(ConfigError) as refused:
        parse_url(f"mysql://app@db.example/shop?{key}=s3cret")
    assert "s3cret" not in str(refused.value)


def test_a_password_in_the_query_stays_out_of_backend_url_and_repr(postgres_url: str) -> None:
    # The test server trusts the role: the passwords are sent and ignored.
    b = open_backend(f"{postgres_url}?password=hunter2&sslpassword=k3y&application_name=t")
    try:
        for shown in (b.url, repr(b)):
            assert "hunter2" not in shown and "k3y" not in shown, shown
            assert "application_name=t" in shown
    finally:
        b.close()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_bare_url_connects_with_libpqs_defaults_as_psql_does(
    scheme: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, 2.7: ``postgresql://`` reached libpq as ``postgresql:``, and libpq
    said "missing '=' after 'postgresql:'". It names no host, user or database:
    libpq takes them from PGHOST, PGUSER, ... and its defaults, as psql does."""
    from urllib.parse import urlsplit

    parts = urlsplit(postgres_url)
    for name, value in (("PGHOST", parts.hostname), ("PGPORT", parts.port),
                        ("PGUSER", parts.username), ("PGPASSWORD", parts.password),
                        ("PGDATABASE", parts.path.lstrip("/"))):  # fmt: skip
        monkeypatch.setenv(name, str(value or ""))
    backend = open_backend(f"{scheme}://")
    try:
        assert backend.queues() == []
    finally:
        backend.close()
    # Its error messages name the server libpq connects to.
    where = parse_url(f"{scheme}://").where
    assert where == f"{parts.hostname}:{parts.port}/{parts.path.lstrip('/')}"


@pytest.mark.parametrize(
    ("query", "suggestion"),
    [("pool_sise=3", "pool_size"), ("shema=jobs", "schema"), ("sslmod=require", "sslmode")],
)
def test_a_misspelt_url_option_is_named_with_a_suggestion(query: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_url(f"postgresql://app:s3cret@localhost/db?{query}")
    message = str(raised.value)
    assert f"unknown option {query.split('=')[0]!r}: did you mean {suggestion!r}?" in message
    assert "s3cret" not in message


def test_an_option_of_a_later_libpq_still_reaches_libpq() -> None:
    assert "future_keyword=1" in parse_url("postgresql://localhost/db?future_keyword=1").conninfo
