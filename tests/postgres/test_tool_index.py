"""Schema version 6 (issue 38 item 1) on PostgreSQL: a task's tool in the
``tool`` column its insert writes (``agentq.backends.tool_column``). A listing
filtered on a tool (``GET /v1/tasks?tool=refund``, the console's tool filter)
walks the tool's index and reads no row it drops; before, it read every task
and dropped the other tools' ("Rows Removed by Filter": the whole ledger). A
database of version 5 is brought forward: the tools filled in from the
records. Schema version 9 does the same for a durable run's agent (``GET
/v1/runs?agent=...``), and brings the runs of a database of version 8 forward."""

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
    # Twenty refunds, the oldest; many shipments after them; one newer refund.
    b.transact(lambda tx: [tx.put_record("tasks", f"t{i:06d}", encode_record(
        {"status": "succeeded", "tool": "refund", "kind": "action"}))
        for i in range(20)])  # fmt: skip
    b.transact(lambda tx: [tx.put_record("tasks", f"t{i:06d}", encode_record(
        {"status": "succeeded", "tool": "ship", "kind": "action"}))
        for i in range(20, NOISE)])  # fmt: skip
    b.transact(lambda tx: tx.put_record("tasks", "t999999", {"status": "succeeded",
                                                             "tool": "refund"}))  # fmt: skip


# fmt: off
LISTINGS: list[tuple[dict[str, Any], int]] = [
    # The operator's task page filtered on a tool: newest first, of the callers' kind.
    ({"where": {"tool": ["refund"], "kind": ["action", None]}, "descending": True,
      "limit": 11}, 11),
    ({"where": {"tool": ["refund"]}, "descending": True, "after": "t000015", "limit": 11}, 11),
    ({"where": {"tool": ["refund", "void"], "status": ["succeeded"]}, "limit": 51}, 21),
    ({"where": {"tool": ["nothing"]}, "limit": 11}, 0),
]
# fmt: on


def test_a_tool_listing_reads_no_row_it_drops(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = listings_sent(monkeypatch)
    b = open_backend(postgres_url)
    try:
        _fill(b)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE agentq.records")
            for options, found in LISTINGS:
                sent.clear()
                rows = b.list_records("tasks", **options)
                assert len(rows) == found and all(v["tool"] == "refund" for _, v in rows)
                check_one_plan(conn, sent, "records_tool", options)
    finally:
        b.close()


def test_a_schema_of_version_5_gets_the_tools(postgres_url: str) -> None:
    assert SCHEMA_VERSION >= 6
    s = '"agentq"'
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema_at(conn, s, 5)
        for tbl, k, v in (("tasks", "t1", '{"status":"dead","tool":"refund","a":"\\u0000"}'),
                          ("tasks", "t2", '{"status":"succeeded","tool":"ship"}'),
                          ("tasks", "t3", '{"status":"succeeded","tool":3}'),
                          ("tasks", "t4", '{"status":"succeeded"}'),
                          ("runs", "r1", '{"tool":"refund"}')):  # fmt: skip
            conn.execute(f"INSERT INTO {s}.records (tbl, k, v) VALUES (%s, %s, %s)", (tbl, k, v))
    b = open_backend(postgres_url)
    try:
        assert [k for k, _ in b.list_records("tasks", where={"tool": ["refund"]})] == ["t1"]
        b.transact(lambda tx: tx.put_record("tasks", "t5", {"tool": "refund"}))
        assert [k for k, _ in b.list_records("tasks", where={"tool": ["refund"]})] == ["t1", "t5"]
    finally:
        b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        tools = conn.execute(f"SELECT tbl, k, tool FROM {s}.records WHERE tool IS NOT NULL "
                             "ORDER BY k").fetchall()  # fmt: skip
        version = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
    assert tools == [("tasks", "t1", "refund"), ("tasks", "t2", "ship"), ("tasks", "t5", "refund")]
    assert version == (SCHEMA_VERSION,)


def test_an_agents_runs_listing_reads_no_row_it_drops(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GET /v1/runs?agent=...`` (schema version 9): a run's agent is in the
    tool column, so a listing of an agent's runs walks the tool index; before,
    it read every run's conversation and dropped the other agents'. An owner's
    or a rare status's index still serves the listings it narrows."""
    sent = listings_sent(monkeypatch)
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: [tx.put_record("runs", f"r{i:06d}", {
            "status": "succeeded", "agent": "helper" if i < 20 else "triage",
            "owner": "ann" if i % 2 else "bob", "messages": [{"role": "user", "content": "x"}]})
            for i in range(NOISE)])  # fmt: skip
        b.transact(lambda tx: tx.put_record("runs", "r999999", {
            "status": "awaiting_tools", "agent": "triage", "owner": "ann"}))  # fmt: skip
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE agentq.records")
            for options, found, index in (
                # The console's runs page filtered on an agent: newest first.
                ({"where": {"agent": ["helper"]}, "descending": True, "limit": 11}, 11,
                 "records_tool"),
                ({"where": {"agent": ["helper"]}, "descending": True, "after": "r000015",
                  "limit": 11}, 11, "records_tool"),
                ({"where": {"agent": ["helper", "void"], "status": ["succeeded"]},
                  "limit": 101}, 20, "records_tool"),
                ({"where": {"agent": ["nobody"]}, "descending": True, "limit": 101}, 0,
                 "records_tool"),
                ({"where": {"agent": ["triage"], "status": ["awaiting_tools"]}, "limit": 11}, 1,
                 "records_rare_status"),
            ):  # fmt: skip
                sent.clear()
                rows = b.list_records("runs", **options)
                assert len(rows) == found, (options, rows)
                assert all(v["agent"] == options["where"]["agent"][0] for _, v in rows)
                check_one_plan(conn, sent, index, options)
    finally:
        b.close()


def test_a_schema_of_version_8_gets_the_runs_agents(postgres_url: str) -> None:
    assert SCHEMA_VERSION >= 9
    s = '"agentq"'
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema_at(conn, s, 8)
        for tbl, k, v, tool in (
            ("runs", "r1", '{"status":"succeeded","agent":"helper","x":"\\u0000"}', None),
            ("runs", "r2", '{"status":"succeeded","agent":"triage","tool":"helper"}', None),
            ("runs", "r3", '{"status":"succeeded","agent":3}', None),
            ("runs", "r4", '{"status":"succeeded"}', None),
            ("tasks", "t1", '{"status":"succeeded","tool":"refund","agent":"helper"}', "refund"),
        ):  # fmt: skip
            conn.execute(f"INSERT INTO {s}.records (tbl, k, v, tool) VALUES (%s, %s, %s, %s)",
                         (tbl, k, v, tool))  # fmt: skip
    b = open_backend(postgres_url)
    try:
        assert [k for k, _ in b.list_records("runs", where={"agent": ["helper"]})] == ["r1"]
        b.transact(lambda tx: tx.put_record("runs", "r5", {"agent": "helper"}))
        assert [k for k, _ in b.list_records("runs", where={"agent": ["helper"]})] == ["r1", "r5"]
        assert [k for k, _ in b.list_records("tasks", where={"tool": ["refund"]})] == ["t1"]
    finally:
        b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        named = conn.execute(f"SELECT tbl, k, tool FROM {s}.records WHERE tool IS NOT NULL "
                             "ORDER BY tbl, k").fetchall()  # fmt: skip
        version = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
    assert named == [("runs", "r1", "helper"), ("runs", "r2", "triage"), ("runs", "r5", "helper"),
                     ("tasks", "t1", "refund")]  # fmt: skip
    assert version == (SCHEMA_VERSION,)
