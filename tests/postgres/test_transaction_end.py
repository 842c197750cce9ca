"""How a transaction of ``transact`` ends on PostgreSQL, now that ``BEGIN`` rides
with the first statement and the wake-up with the ``COMMIT``
(:mod:`agentq.backends.postgres.pipeline`): what commits, what does not, and
that a failure is never reported as a commit."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import Transaction, open_backend  # noqa: E402
from agentq.errors import TransactionError  # noqa: E402
from agentq.spec import QueueSpec  # noqa: E402


def test_a_statement_error_the_function_swallowed_is_not_reported_as_committed(
    postgres_url: str,
) -> None:
    # On PostgreSQL a failed statement aborts the whole transaction; a function
    # that catches the error and returns used to get its result back from
    # transact as if it had committed, while the server had rolled it back.
    b = open_backend(postgres_url)
    try:
        b.create_queue(QueueSpec.simple("Jobs"))

        def fn(tx: Transaction) -> str:
            tx.put_record("notes", "k", {"n": 1})
            try:
                tx.execute("SELECT 1 / 0")
            except psycopg.errors.DivisionByZero:
                pass
            return "done"

        with pytest.raises(TransactionError, match="rolled the whole transaction back"):
            b.transact(fn)
        assert b.get_record("notes", "k") is None
        assert b.stats("Jobs").depth == 0
    finally:
        b.close()


def test_a_function_that_runs_no_statement_commits_nothing_and_returns(
    postgres_url: str,
) -> None:
    b = open_backend(postgres_url)
    try:
        assert b.transact(lambda tx: 7) == 7
        b.transact(lambda tx: tx.put_record("notes", "k", {"n": 2}))
        assert b.get_record("notes", "k") == {"n": 2}
    finally:
        b.close()


def test_an_application_statement_without_parameters_may_hold_several_statements(
    postgres_url: str,
) -> None:
    # Sent on its own (simple protocol), not in a pipeline, which would refuse it.
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: tx.execute("CREATE TABLE a (id int); CREATE TABLE b (id int)"))
        rows: Any = b.transact(
            lambda tx: tx.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('a', 'b')"
            )
        )
        assert rows == [(2,)]
    finally:
        b.close()


def test_the_wake_up_sent_with_the_commit_is_heard_and_one_of_a_rollback_is_not(
    postgres_url: str,
) -> None:
    b = open_backend(postgres_url)
    listener: Any = psycopg.connect(postgres_url, autocommit=True)
    try:
        b.create_queue(QueueSpec.simple("Jobs"))
        listener.execute(f'LISTEN "{b._channel}"')

        def fails(tx: Transaction) -> None:
            tx.send("Jobs", "no", b"x")
            raise RuntimeError("changed its mind")

        with pytest.raises(RuntimeError):
            b.transact(fails)
        b.transact(lambda tx: tx.send("Jobs", "yes", b"x"))
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
        # The queue's name, then this process's mark (its own readers woke in process).
        assert [note.split(",")[0] for note in heard] == ["Jobs"]
        assert [m.key for batch in b.stream("Jobs", 10) for m in batch] == [("yes",)]
    finally:
        listener.close()
        b.close()
