"""A connection the server ends while a transaction runs on it (a restart, a
failover, ``pg_terminate_backend``): found by the chaos run's server restarts
(``python -m tests.chaos --backend postgresql``), here one at a time.

Before its commit, nothing of the transaction is committed (the server rolls
back what a lost connection held), so the backend runs it again on another
connection, as it does after a serialization failure. During its commit the
outcome is unknown: it is never run again, and the error says so.
"""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import Transaction, open_backend  # noqa: E402
from agentq.errors import BackendUnavailable  # noqa: E402


def _end_own_connection(tx: Transaction, admin: Any) -> None:
    """Have the server end the connection ``tx`` runs on, and wait until it did."""
    ((pid,),) = tx.execute("SELECT pg_backend_pid()")
    admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))


def test_a_transaction_whose_connection_ended_before_its_commit_runs_again(
    postgres_url: str,
) -> None:
    b = open_backend(postgres_url)
    admin: Any = psycopg.connect(postgres_url, autocommit=True)
    runs: list[int] = []

    def fn(tx: Transaction) -> str:
        runs.append(1)
        tx.put_record("ledger", "k", {"run": len(runs)})
        if len(runs) == 1:
            _end_own_connection(tx, admin)
            tx.execute("SELECT 1")  # the connection is gone: nothing was committed
        return "done"

    try:
        assert b.transact(fn) == "done"
        assert len(runs) == 2
        assert b.get_record("ledger", "k") == {"run": 2}
    finally:
        admin.close()
        b.close()


def test_a_connection_lost_during_the_commit_is_not_run_again_and_says_so(
    postgres_url: str,
) -> None:
    b = open_backend(postgres_url)
    admin: Any = psycopg.connect(postgres_url, autocommit=True)
    # A deferred trigger runs inside COMMIT: it ends its own connection there.
    admin.execute("CREATE TABLE doomed (id int)")
    admin.execute(
        "CREATE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$"
    )
    admin.execute(
        "CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON doomed "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_session()"
    )
    runs: list[int] = []

    def fn(tx: Transaction) -> None:
        runs.append(1)
        tx.execute("INSERT INTO doomed VALUES (1)")

    try:
        with pytest.raises(BackendUnavailable, match="outcome is unknown"):
            b.transact(fn)
        assert len(runs) == 1  # it may have committed: running it again could do it twice
        assert admin.execute("SELECT count(*) FROM doomed").fetchone() == (0,)
        b.transact(lambda tx: tx.put_record("ledger", "after", {"ok": True}))  # pool recovered
    finally:
        admin.close()
        b.close()
