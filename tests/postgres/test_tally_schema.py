"""Schema version 3 (issue 38 item 1): the console chart's per-minute tallies.
A database of version 2 is brought forward (its finished tasks are not
counted: the chart starts empty, as the CHANGELOG says), and a completion's
tallies are appended, not updated in place, so the task records' updates stay
what they were (no index touched: ``tests/postgres/test_rare_status.py``)."""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg")

from agentq.backends import open_backend  # noqa: E402
from agentq.backends.postgres.schema import SCHEMA_VERSION  # noqa: E402
from agentq.backends.tallies import Tally  # noqa: E402
from tests.postgres.old_schemas import schema_at  # noqa: E402


def test_a_schema_of_version_2_gets_the_tallies(postgres_url: str) -> None:
    assert SCHEMA_VERSION >= 3
    s = '"agentq"'
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema_at(conn, s, 2)
        conn.execute(f"INSERT INTO {s}.records (tbl, k, v) VALUES ('tasks', 't1', "
                     """'{"status":"succeeded","finished_at":"2025-01-01T00:00:00+00:00"}')""")
    b = open_backend(postgres_url)
    try:
        assert b.read_tallies(0, 2**40) == []  # the chart of an upgraded database starts empty
        b.transact(lambda tx: tx.add_tallies([Tally(5, "local", "succeeded", 2, 3)]))
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            pending = conn.execute(f"SELECT count(*) FROM {s}.task_tally_changes").fetchone()
        assert pending == (1,)  # appended, folded by the next read
        assert b.read_tallies(5, 6) == [Tally(5, "", "succeeded", 2, 3)]
        assert b.record_count("tasks") == 1
    finally:
        b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        folded = conn.execute(f"SELECT minute, n FROM {s}.task_tallies").fetchall()
        pending = conn.execute(f"SELECT count(*) FROM {s}.task_tally_changes").fetchone()
        version = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
    assert folded == [(5, 3)] and pending == (0,)
    assert version == (SCHEMA_VERSION,)
