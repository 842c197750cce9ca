"""agentq's schema on PostgreSQL (its own schema, a version table) and the
wake-ups: a NOTIFY that is delivered only if the sending transaction commits."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import Transaction, open_backend  # noqa: E402
from agentq.backends.postgres.schema import SCHEMA_VERSION  # noqa: E402
from agentq.errors import ConfigError, DuplicateKey  # noqa: E402
from agentq.spec import QueueSpec  # noqa: E402


def _connect(url: str) -> Any:
    return psycopg.connect(url, autocommit=True)


def test_tables_live_in_the_named_schema_with_a_version(postgres_url: str) -> None:
    b = open_backend(postgres_url + "?schema=jobs")
    try:
        b.create_queue(QueueSpec.simple("Tasks"))
        b.transact(lambda tx: tx.put_record("ledger", "k", {"n": 1}))
    finally:
        b.close()
    with _connect(postgres_url) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'jobs'"
            )
        }
        assert {"schema_version", "queues", "records", "Tasks"} <= tables
        public = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert public == (0,)  # nothing of agentq's beside the application's tables
        assert conn.execute("SELECT max(version) FROM jobs.schema_version").fetchone() == (
            SCHEMA_VERSION,
        )


def test_opening_twice_applies_the_migrations_once(postgres_url: str) -> None:
    open_backend(postgres_url).close()
    open_backend(postgres_url).close()
    with _connect(postgres_url) as conn:
        rows = conn.execute("SELECT version FROM agentq.schema_version").fetchall()
    assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]


def test_a_schema_newer_than_this_agentq_is_refused(postgres_url: str) -> None:
    open_backend(postgres_url).close()
    with _connect(postgres_url) as conn:
        conn.execute(
            "INSERT INTO agentq.schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,)
        )
    with pytest.raises(ConfigError, match="newer than this agentq"):
        open_backend(postgres_url)


def test_a_send_notifies_listeners_only_when_it_commits(postgres_url: str) -> None:
    b = open_backend(postgres_url)
    listener = _connect(postgres_url)
    try:
        b.create_queue(QueueSpec.simple("Tasks"))
        listener.execute(f'LISTEN "{b._channel}"')

        def send_then_fail(tx: Transaction) -> None:
            tx.send("Tasks", "a", b"x")
            tx.send("Tasks", "a", b"x")  # DuplicateKey: the transaction rolls back

        with pytest.raises(DuplicateKey):
            b.transact(send_then_fail)
        b.transact(lambda tx: tx.put_record("ledger", "k", {}))  # sends nothing
        b.transact(lambda tx: tx.send("Tasks", "b", b"x"))
        notes = [n.payload.split(",") for n in listener.notifies(timeout=5, stop_after=1)]
        # The rolled-back send announced nothing; the sender marks its own (~ and
        # a per-process mark, which no queue name can be: its listeners skip them).
        assert len(notes) == 1 and notes[0][0] == "Tasks"
        assert len(notes[0]) == 2 and notes[0][1].startswith("~")
        assert [n.payload for n in listener.notifies(timeout=0.2)] == []
    finally:
        listener.close()
        b.close()
