"""libpq's own URL options reach the server as written, spaces included: the
deployment guide's ``options=-c statement_timeout=...`` is one."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import open_backend
from agentq.backends.postgres.config import parse_url
from agentq.errors import TransactionError

OPTIONS = "options=-c%20statement_timeout%3D250"  # -c statement_timeout=250 (ms)


def test_a_space_in_a_libpq_option_stays_a_space() -> None:
    c = parse_url(f"postgresql://app:pw@db.example/shop?schema=jobs&{OPTIONS}")
    # libpq reads %20 as a space and "+" as a plus (it is not a form encoding).
    assert c.conninfo.endswith("?options=-c%20statement_timeout%3D250")
    assert "+" not in c.safe_url


def test_statement_timeout_from_the_url_cancels_a_long_statement(postgres_url: str) -> None:
    b = open_backend(f"{postgres_url}?{OPTIONS}")
    try:
        assert b.transact(lambda tx: tx.execute("SHOW statement_timeout")) == [("250ms",)]
        with pytest.raises(TransactionError, match="statement_timeout"):
            b.transact(lambda tx: tx.execute("SELECT pg_sleep(5)"))
    finally:
        b.close()
