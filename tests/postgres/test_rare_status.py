"""Issue 38 item 1 on PostgreSQL: tasks listed by a rare status (dead, waiting,
awaiting approval...) are read through the index of the ``rare_status`` column,
and that index costs the worker nothing: its status changes (queued -> running
-> succeeded) stay HOT updates. Before, ``GET /v1/tasks?status=dead`` with none
dead read every task (``EXPLAIN``: "Rows Removed by Filter: 100000"); an
earlier attempt indexed the status in a generated column and made every status
change a non-HOT update (0 of 4,000 HOT)."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import encode_fields, encode_record, open_backend  # noqa: E402
from agentq.backends.postgres.schema import SCHEMA_VERSION  # noqa: E402
from tests.postgres.old_schemas import schema_at  # noqa: E402
from tests.postgres.plans import check_one_plan, listings_sent  # noqa: E402

NOISE = 2000


def _fill(b: Any) -> None:
    b.transact(lambda tx: [
        tx.put_record("tasks", f"t{i:06d}", {"status": "succeeded", "tool": "a"})
        for i in range(NOISE)
    ])  # fmt: skip
    b.transact(lambda tx: tx.put_record("tasks", "t999999", {"status": "dead", "tool": "b"}))


def test_a_listing_by_rare_status_reads_no_row_it_drops(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = listings_sent(monkeypatch)
    b = open_backend(postgres_url)
    try:
        _fill(b)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE agentq.records")
            for statuses, limit, found in ((["dead"], 11, 1), (["cancelled"], 11, 0),
                                           (["dead", "waiting"], None, 1)):  # fmt: skip
                sent.clear()
                rows = b.list_records("tasks", where={"status": statuses}, limit=limit)
                assert len(rows) == found
                check_one_plan(conn, sent, "records_rare_status", statuses)
    finally:
        b.close()


def _indexed_columns(url: str) -> tuple[set[str], bool]:
    """The columns the records table's indexes name (keys and predicates), and
    whether any index has an expression."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT i.indexrelid, i.indexprs IS NOT NULL, "
            "pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "WHERE i.indrelid = 'agentq.records'::regclass"
        ).fetchall()
        names = {str(r[0]) for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY (i.indkey) WHERE i.indrelid = 'agentq.records'::regclass")}
        columns = {str(r[0]) for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'agentq.records'::regclass "
            "AND attnum > 0")}  # fmt: skip
    for _, _, predicate in rows:
        names |= {c for c in columns if predicate and c in predicate}
    return names, any(r[1] for r in rows)


def test_a_tasks_common_status_changes_touch_no_indexed_column(postgres_url: str) -> None:
    """PostgreSQL makes an update HOT (no new index entries, less WAL, no index
    page shared between workers) only if no column an index names (in its key
    or its predicate) changes: the indexes name tbl, k, rare_status, owner
    and tool (the last two written by the insert only: agentq.backends.owners,
    agentq.backends.tool_column), and the claim and
    the completion leave rare_status as it was (NULL). Measured by
    pg_stat_user_tables in ``tests/bench/record_writes.py``-style runs (the
    ratio there depends on free space on the page, so it is not asserted)."""
    b = open_backend(postgres_url)
    keys = [f"t{i:04d}" for i in range(20)]
    try:
        b.transact(lambda tx: [tx.put_record("tasks", k, encode_record(
            {"status": "queued", "tool": "a", "args": {"n": 1}})) for k in keys])  # fmt: skip
        # The claim: a swap on the version read; the completion: fields set.
        versions = b.read_records("tasks", keys)
        b.transact(lambda tx: tx.replace_records("tasks", [
            (k, versions[k].version, encode_fields({"status": "running"})) for k in keys]))
        b.transact(lambda tx: tx.update_records("tasks", [
            (k, encode_fields({"status": "succeeded", "result": {"ok": True}})) for k in keys]))
    finally:
        b.close()
    names, expressions = _indexed_columns(postgres_url)
    assert names == {"tbl", "k", "rare_status", "owner", "tool"} and not expressions
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        rows = conn.execute("SELECT count(*) FROM agentq.records "
                            "WHERE tbl = 'tasks' AND rare_status IS NULL").fetchone()
    assert rows == (len(keys),)


def test_a_schema_of_version_1_is_brought_forward(postgres_url: str) -> None:
    assert SCHEMA_VERSION >= 2
    s = '"agentq"'
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema_at(conn, s, 1)
        rows = [("tasks", "t1", '{"status":"dead","tool":"a","arg":"\\u0000"}'),
                ("tasks", "t2", '{"status":"succeeded","tool":"a"}'),
                ("tasks", "t3", '{"status":3}'),
                ("runs", "r1", '{"status":"dead"}')]  # fmt: skip
        for row in rows:
            conn.execute(f"INSERT INTO {s}.records (tbl, k, v) VALUES (%s, %s, %s)", row)
    b = open_backend(postgres_url)
    try:
        dead = b.list_records("tasks", where={"status": ["dead"]})
        assert [k for k, _ in dead] == ["t1"]
        assert b.record_count("tasks") == 3  # counted when the totals were made
    finally:
        b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        marked = conn.execute(f"SELECT tbl, k, rare_status FROM {s}.records "
                              "WHERE rare_status IS NOT NULL ORDER BY k").fetchall()
        version = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
    assert marked == [("tasks", "t1", "dead")]
    assert version == (SCHEMA_VERSION,)


def test_a_listing_of_parked_runs_reads_no_row_it_drops(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable runs awaiting their calls or an approval, or failed, among many
    that succeeded: read through the index, as the tasks' rare statuses."""
    sent = listings_sent(monkeypatch)
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: [tx.put_record("runs", f"r{i:06d}", {"status": "succeeded"})
                               for i in range(NOISE)])  # fmt: skip
        b.transact(lambda tx: tx.put_record("runs", "r999999", {"status": "awaiting_tools"}))
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE agentq.records")
            for statuses, found in ((["awaiting_tools"], 1), (["failed", "cancelled"], 0)):
                sent.clear()
                assert len(b.list_records("runs", where={"status": statuses}, limit=101)) == found
                check_one_plan(conn, sent, "records_rare_status", statuses)
    finally:
        b.close()


def test_a_schema_of_version_4_gets_its_runs_into_the_index(postgres_url: str) -> None:
    """Runs joined the index of rare statuses in version 5 (parked, failed,
    cancelled) and 8 (queued): the runs stored before get their rare status
    from the migrations."""
    s = '"agentq"'
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        schema_at(conn, s, 4)
        for row in (("runs", "r1", '{"status":"awaiting_approval","x":"\\u0000"}'),
                    ("runs", "r2", '{"status":"queued"}'), ("runs", "r3", '{"status":"failed"}'),
                    ("tasks", "t1", '{"status":"failed"}')):  # fmt: skip
            conn.execute(f"INSERT INTO {s}.records (tbl, k, v) VALUES (%s, %s, %s)", row)
    b = open_backend(postgres_url)
    try:
        parked = b.list_records("runs", where={"status": ["awaiting_approval", "failed"]})
        assert [k for k, _ in parked] == ["r1", "r3"]
    finally:
        b.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        marked = conn.execute(f"SELECT tbl, k, rare_status FROM {s}.records "
                              "WHERE rare_status IS NOT NULL ORDER BY k").fetchall()
    # The task was filled by version 2's migration only: not a task row here.
    assert marked == [("runs", "r1", "awaiting_approval"), ("runs", "r2", "queued"),
                      ("runs", "r3", "failed")]  # fmt: skip
