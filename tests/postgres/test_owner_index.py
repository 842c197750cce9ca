"""Schema version 4 (issue 38 item 1) on PostgreSQL: a task's owner in the
``owner`` column its insert writes (``agentq.backends.owners``). An agent's own
listing walks the owner's index and reads no row it drops; before, it read
every task and dropped the others' ("Rows Removed by Filter": the whole
ledger; 7.6 s for an agent's page at a million tasks). A database of version 3
is brought forward: the owners filled in from the records, the owners' counts
made."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import encode_record, open_backend  # noqa: E402
from agentq.backends.postgres.schema import SCHEMA_VERSION  # noqa: E402
from tests.postgres.old_schemas import schema_at  # noqa: E402
from tests.postgres.plans import check_one_plan, listings_sent  # noqa: E402

NOISE = 2000


def _fill(b: Any) -> None:
    # ann's few tasks, the oldest; bob's many after them, half dead.
    b.transact(lambda tx: [tx.put_record("tasks", f"t{i:06d}", encode_record(
        {"status": "succeeded", "tool": "a", "created_by": "ann"}))
        for i in range(20)])  # fmt: skip
    b.transact(lambda tx: [tx.put_record("tasks", f"t{i:06d}", encode_record(
        {"status": "dead" if i % 2 else "succeeded", "tool": "a", "created_by": "bob"}))
        for i in range(20, NOISE)])  # fmt: skip
    b.transact(lambda tx: tx.put_record("tasks", "t999999", {"status": "dead", "tool": "b",
                                                             "created_by": "ann"}))  # fmt: skip


# fmt: off
LISTINGS: list[tuple[dict[str, Any], int, str]] = [
    ({"where": {"created_by": ["ann"], "kind": ["action", None]}, "descending": True,
      "limit": 11}, 11, "records_owner"),
    ({"where": {"created_by": ["ann"]}, "descending": True, "after": "t000015", "limit": 11},
     11, "records_owner"),
    ({"where": {"created_by": ["ann"], "status": ["dead"]}, "limit": 11}, 1, "records_owner_rare"),
    ({"where": {"created_by": ["ann", "carl"], "status": ["dead", "waiting"]}}, 1,
     "records_owner_rare"),
]
# fmt: on


def test_an_owners_listing_reads_no_row_it_drops(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = listings_sent(monkeypatch)
    b = open_backend(postgres_url)
    try:
        _fill(b)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE agentq.records")
            for options, found, index in LISTINGS:
                sent.clear()
                rows = b.list_records("tasks", **options)
                assert len(rows) == found and all(
                    v["created_by"] == "ann" for _, v in rows)
                check_one_plan(conn, sent, index, options)
        assert b.record_count("tasks", owner="ann") == 21
    finally:
        b.close()


def test_a_schema_of_version_3_gets_the_owners(postgres_url: str) -> None:
    assert SCHEMA_VERSION >= 4
    s = '"agentq"'
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema_at(conn, s, 3)
        for k, v, rare in (("t1", '{"status":"dead","created_by":"ann","a":"\\u0000"}', "dead"),
                           ("t2", '{"status":"succeeded","created_by":"ann"}', None),
                           ("t3", '{"status":"succeeded","created_by":3}', None),
                           ("t4", '{"status":"succeeded"}', None)):  # fmt: skip
            conn.execute(f"INSERT INTO {s}.records (tbl, k, v, rare_status) "
                         "VALUES ('tasks', %s, %s, %s)", (k, v, rare))  # fmt: skip
        conn.execute(f"INSERT INTO {s}.records (tbl, k, v) VALUES ('runs', 'r1', "
                     """'{"created_by":"ann"}')""")  # fmt: skip
    b = open_backend(postgres_url)
    try:
        dead = b.list_records("tasks", where={"created_by": ["ann"], "status": ["dead"]})
        assert [k for k, _ in dead] == ["t1"]
        assert b.record_count("tasks", owner="ann") == 2
        b.transact(lambda tx: tx.put_record("tasks", "t5", {"created_by": "ann"}))
        b.transact(lambda tx: tx.delete_record("tasks", "t2"))
        assert b.record_count("tasks", owner="ann") == 2
    finally:
        b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        owned = conn.execute(f"SELECT tbl, k, owner FROM {s}.records WHERE owner IS NOT NULL "
                             "ORDER BY k").fetchall()  # fmt: skip
        version = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
    assert owned == [("tasks", "t1", "ann"), ("tasks", "t5", "ann")]
    assert version == (SCHEMA_VERSION,)


def test_an_owners_runs_listing_reads_no_row_it_drops(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A principal's own runs (``GET /v1/runs`` as an agent): the owner's index,
    not every run's conversation (schema version 7)."""
    sent = listings_sent(monkeypatch)
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: [tx.put_record("runs", f"r{i:06d}", {
            "status": "succeeded", "owner": "ann" if i < 20 else "bob"})
            for i in range(NOISE)])  # fmt: skip
        b.transact(lambda tx: tx.put_record("runs", "r999999", {"status": "awaiting_tools",
                                                                "owner": "ann"}))  # fmt: skip
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE agentq.records")
            for options, found, index in (
                ({"where": {"owner": ["ann"]}, "descending": True, "limit": 11}, 11,
                 "records_owner"),
                ({"where": {"owner": ["ann"], "status": ["awaiting_tools"]}, "limit": 11}, 1,
                 "records_owner_rare"),
            ):  # fmt: skip
                sent.clear()
                rows = b.list_records("runs", **options)
                assert len(rows) == found and all(v["owner"] == "ann" for _, v in rows)
                check_one_plan(conn, sent, index, options)
    finally:
        b.close()


def test_a_schema_of_version_6_gets_the_runs_owners(postgres_url: str) -> None:
    assert SCHEMA_VERSION >= 7
    s = '"agentq"'
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema_at(conn, s, 6)
        for tbl, k, v, owner in (
            ("runs", "r1", '{"status":"succeeded","owner":"ann","x":"\\u0000"}', None),
            ("runs", "r2", '{"status":"succeeded","owner":"bob","created_by":"ann"}', None),
            ("runs", "r3", '{"status":"succeeded","owner":3}', None),
            ("tasks", "t1", '{"status":"succeeded","created_by":"ann","owner":"bob"}', "ann"),
        ):  # fmt: skip
            conn.execute(f"INSERT INTO {s}.records (tbl, k, v, owner) VALUES (%s, %s, %s, %s)",
                         (tbl, k, v, owner))  # fmt: skip
    b = open_backend(postgres_url)
    try:
        assert [k for k, _ in b.list_records("runs", where={"owner": ["ann"]})] == ["r1"]
        b.transact(lambda tx: tx.put_record("runs", "r4", {"owner": "ann"}))
        assert [k for k, _ in b.list_records("runs", where={"owner": ["ann"]})] == ["r1", "r4"]
        assert b.record_count("tasks", owner="ann") == 1  # the tasks' counts as they were
    finally:
        b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        owned = conn.execute(f"SELECT tbl, k, owner FROM {s}.records WHERE owner IS NOT NULL "
                             "ORDER BY tbl, k").fetchall()  # fmt: skip
        counted = conn.execute(  # folded into the totals by the count, or not yet
            f"SELECT owner, sum(n) FROM (SELECT tbl, owner, n FROM {s}.owner_totals UNION ALL "
            f"SELECT tbl, owner, n FROM {s}.owner_total_changes) AS c WHERE tbl = 'runs' "
            "GROUP BY owner ORDER BY owner").fetchall()
    assert owned == [("runs", "r1", "ann"), ("runs", "r2", "bob"), ("runs", "r4", "ann"),
                     ("tasks", "t1", "ann")]  # fmt: skip
    assert [(o, int(n)) for o, n in counted] == [("ann", 2), ("bob", 1)]
