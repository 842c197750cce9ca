"""Another role in the same PostgreSQL database (issue 40, items 7-10): a role
that may only read, a second tenant listening on agentq's channel or flooding
it, holding agentq's advisory lock, or owning the schema agentq would use.
See docs/security.md, "The tenant boundary on PostgreSQL"."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import Runtime, ToolContext, tool
from agentq.backends import open_backend
from agentq.backends.postgres.schema import ddl
from agentq.backends.postgres.wakeups import WAKE_INTERVAL
from agentq.errors import BackendUnavailable, ConfigError
from agentq.spec import QueueSpec
from tests.postgres.server import DatabaseFactory, as_role

ROOT = Path(__file__).resolve().parents[2]


class Args(BaseModel):
    n: int


@tool(queue="work")
def job(ctx: ToolContext, args: Args) -> None:
    pass


def _agentq(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTQ_DB": db}
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _grant(factory: DatabaseFactory, url: str, *statements: str) -> None:
    admin: Any = factory.admin(url)
    try:
        for statement in statements:
            admin.execute(statement)
    finally:
        admin.close()


def test_a_select_only_role_lists_tasks_and_a_write_is_one_clear_line(
    postgres_url_factory: DatabaseFactory,
) -> None:
    url = postgres_url_factory.create()
    rt = Runtime(url, tools=[job])
    try:
        task = rt.enqueue_action("job", {"n": 1})
    finally:
        rt.close()
    reader = postgres_url_factory.create_role()
    _grant(
        postgres_url_factory, url,
        f'GRANT USAGE ON SCHEMA agentq TO "{reader}"',
        f'GRANT SELECT ON ALL TABLES IN SCHEMA agentq TO "{reader}"',
    )  # fmt: skip
    db = as_role(url, reader)
    listed = _agentq(db, "tasks", "--json")
    assert listed.returncode == 0, listed.stderr
    assert task.task_id in listed.stdout
    shown = _agentq(db, "task", task.task_id, "--json")
    assert shown.returncode == 0, shown.stderr
    for reading in (["inspect", "--json"], ["approvals"], ["schedules"], ["dlq", "list"]):
        read = _agentq(db, *reading)
        assert read.returncode == 0, (reading, read.stderr)
    cancelled = _agentq(db, "cancel", task.task_id)
    assert cancelled.returncode != 0
    [line] = cancelled.stderr.strip().splitlines()
    assert line.startswith("agentq: error:") and "permission denied" in line, line
    assert "may only read" in line, line


def _as(url: str, role: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(as_role(url, role), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def _relations(factory: DatabaseFactory, url: str) -> list[str]:
    admin: Any = factory.admin(url)
    try:
        rows = admin.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'agentq' ORDER BY 1"
        ).fetchall()
    finally:
        admin.close()
    return [row[0] for row in rows]


def test_a_schema_another_role_created_first_is_refused_naming_its_owner(
    postgres_url_factory: DatabaseFactory,
) -> None:
    url = postgres_url_factory.create()
    agent, tenant = postgres_url_factory.create_role(), postgres_url_factory.create_role()
    database = url.rsplit("/", 1)[1]
    _grant(
        postgres_url_factory, url, f'GRANT CREATE ON DATABASE "{database}" TO "{agent}", "{tenant}"'
    )
    _as(url, tenant, "CREATE SCHEMA agentq", f'GRANT USAGE, CREATE ON SCHEMA agentq TO "{agent}"')
    owned = rf"schema 'agentq' is owned by role '{tenant}'"
    with pytest.raises(ConfigError, match=owned) as refused:
        open_backend(as_role(url, agent))
    assert agent in str(refused.value)
    assert _relations(postgres_url_factory, url) == []  # nothing was created in it


def test_an_agentq_table_another_role_created_first_is_refused_naming_its_owner(
    postgres_url_factory: DatabaseFactory,
) -> None:
    # The schema is the administrator's (the database owner's), shared with the tenant.
    url = postgres_url_factory.create()
    agent, tenant = postgres_url_factory.create_role(), postgres_url_factory.create_role()
    _grant(
        postgres_url_factory, url,
        "CREATE SCHEMA agentq",
        f'GRANT USAGE, CREATE ON SCHEMA agentq TO "{agent}", "{tenant}"',
    )  # fmt: skip
    # The tenant lays out agentq's tables itself (the printed DDL), as if agentq had.
    _as(url, tenant, *ddl("agentq")[1:], f'GRANT ALL ON ALL TABLES IN SCHEMA agentq TO "{agent}"')
    with pytest.raises(ConfigError, match=rf"table 'agentq.\w+' is owned by role '{tenant}'"):
        open_backend(as_role(url, agent))
    # The administrator's schema with agentq's own tables is used as before.
    _as(url, tenant, *(f"DROP TABLE agentq.{t}" for t in _relations(postgres_url_factory, url)
                       if not t.endswith("_pkey") and not t.startswith("records_")))  # fmt: skip
    # Its functions too: the records' triggers would run them with agentq's rights.
    with pytest.raises(ConfigError, match=rf"function 'agentq.\w+' is owned by role '{tenant}'"):
        open_backend(as_role(url, agent))
    _as(url, tenant, "DROP FUNCTION agentq.count_record_total, agentq.count_owner_total")
    open_backend(as_role(url, agent)).close()


def test_a_role_that_may_only_read_uses_the_schema_of_agentqs_own_role(
    postgres_url_factory: DatabaseFactory,
) -> None:
    # agentq's role owns the schema; a reader that may not write there trusts it.
    url = postgres_url_factory.create()
    agent, reader = postgres_url_factory.create_role(), postgres_url_factory.create_role()
    database = url.rsplit("/", 1)[1]
    _grant(postgres_url_factory, url, f'GRANT CREATE ON DATABASE "{database}" TO "{agent}"')
    b = open_backend(as_role(url, agent))
    try:
        b.transact(lambda tx: tx.put_record("ledger", "k", {"n": 1}))
    finally:
        b.close()
    _as(
        url, agent,
        f'GRANT USAGE ON SCHEMA agentq TO "{reader}"',
        f'GRANT SELECT ON ALL TABLES IN SCHEMA agentq TO "{reader}"',
    )  # fmt: skip
    r = open_backend(as_role(url, reader))
    try:
        assert r.get_record("ledger", "k") == {"n": 1}
    finally:
        r.close()


def test_a_role_holding_agentqs_advisory_lock_makes_init_fail_naming_the_lock(
    postgres_url_factory: DatabaseFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentq.backends.postgres import schema

    monkeypatch.setattr(schema, "LOCK_WAIT_SECONDS", 1.0, raising=False)
    url = postgres_url_factory.create()
    tenant: Any = postgres_url_factory.admin(url)  # another session of the same database
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            open_backend(url).close()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    try:
        tenant.execute("SELECT pg_advisory_lock(%s)", (schema._LOCK_KEY,))
        started = time.monotonic()
        thread = threading.Thread(target=init, daemon=True)
        thread.start()
        thread.join(20)
        assert not thread.is_alive(), "init still waits for the advisory lock after 20 s"
        assert time.monotonic() - started < 10
    finally:
        tenant.close()  # releases the lock: a waiting init goes on
        thread.join(20)
    [error] = outcome
    assert isinstance(error, BackendUnavailable), error
    assert "advisory lock" in str(error) and str(schema._LOCK_KEY) in str(error)
    assert "pid" in str(error)  # who holds it


def test_another_role_hears_nothing_on_agentqs_channel_and_cannot_learn_it(
    postgres_url_factory: DatabaseFactory,
) -> None:
    import psycopg

    url = postgres_url_factory.create()
    b = open_backend(url)
    tenant = psycopg.connect(as_role(url, postgres_url_factory.create_role()), autocommit=True)
    try:
        b.create_queue(QueueSpec.simple("payments"))
        # The channel's name as it was (agentq_<schema>), and as a guess can make it.
        tenant.execute('LISTEN "agentq_agentq"')
        b.transact(lambda tx: tx.send("payments", "1", b"x"))
        assert [n.payload for n in tenant.notifies(timeout=1.0)] == []
        # The secret part is in agentq's schema, which the tenant may not read.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenant.execute("SELECT v FROM agentq.records")
    finally:
        tenant.close()
        b.close()


def test_a_flood_of_notifications_causes_bounded_database_work(
    postgres_url_factory: DatabaseFactory,
) -> None:
    import psycopg

    url = postgres_url_factory.create()
    b: Any = open_backend(url)
    flooder = psycopg.connect(url, autocommit=True)  # as if the channel's name were known
    leases = []
    lease = b._leases.lease

    def counted(*args: Any, **kwargs: Any) -> Any:
        leases.append(1)
        return lease(*args, **kwargs)

    b._leases.lease = counted
    seconds = 3.0
    try:
        b.create_queue(QueueSpec.simple("payments"))
        receiver = threading.Thread(
            target=lambda: [None for _ in b.stream("payments", max_duration=seconds)]
        )
        receiver.start()
        assert b._listener.listening.wait(10)
        started = time.monotonic()
        for i in range(3000):  # each its own transaction, as a flood of NOTIFYs is
            flooder.execute("SELECT pg_notify(%s, %s)", (b._channel, f"payments,n{i}"))
        flooded = time.monotonic() - started
        receiver.join(30)
    finally:
        flooder.close()
        b.close()
    assert b._listener.heard > 1000, (b._listener.heard, flooded)
    # A wake-up at most every WAKE_INTERVAL, and a poll a second: not one per notification.
    assert len(leases) <= seconds / WAKE_INTERVAL + 10, (len(leases), b._listener.heard, flooded)
    assert len(leases) < b._listener.heard / 2, (len(leases), b._listener.heard, flooded)
