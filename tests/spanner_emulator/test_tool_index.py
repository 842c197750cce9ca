"""Spanner keeps the tasks' tools and the durable runs' agents in a column
with an index, as SQLite and PostgreSQL do (issue 38 item 1,
``agentq.backends.tool_column``): a listing filtered on tools (or a runs
listing on agents) walks the tool index instead of filtering every record's
JSON, and a database an older agentq made gets the column, its records' names
and the index from ``agentq init`` (``apply_ddl``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentq import open_backend
from agentq.backends import Backend

from .fixtures import EmulatorDatabase
from .old_tables import create_old_records_table
from .snapshots import recording


def test_a_tool_listing_walks_its_index(
    records_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    b: Any = records_backend
    b.transact(lambda tx: [
        tx.put_record("tasks", f"t{i:03d}", {"status": "dead" if i % 7 == 0 else "succeeded",
                                             "tool": "refund" if i % 25 == 3 else "ship",
                                             "created_by": "ann" if i % 2 else "bob"})
        for i in range(150)
    ])  # fmt: skip
    sent = recording(b, monkeypatch)
    listed = b.list_records("tasks", where={"tool": ["refund"]}, descending=True, limit=3)
    assert [k for k, _ in listed] == ["t128", "t103", "t078"]
    assert len(sent) == 1 and b.dialect.tool_index in sent[0] and "FORCE_INDEX" in sent[0]
    sent.clear()
    two = b.list_records("tasks", where={"tool": ["refund", "void"], "status": ["succeeded"]})
    assert [k for k, _ in two] == ["t003", "t053", "t078", "t103", "t128"]
    assert len(sent) == 1 and b.dialect.tool_index in sent[0]
    sent.clear()
    # An owner's listing walks the owner's index (narrower for an agent), a
    # rare status's the rare statuses', and checks the tool on what it reads.
    mine = b.list_records("tasks", where={"tool": ["refund"], "created_by": ["ann"]})
    assert [k for k, _ in mine] == ["t003", "t053", "t103"]
    assert len(sent) == 1 and b.dialect.owner_index in sent[0]
    sent.clear()
    dead = b.list_records("tasks", where={"tool": ["refund"], "status": ["dead"]})
    assert [k for k, _ in dead] == ["t028"]
    assert len(sent) == 1 and b.dialect.rare_index in sent[0]


def test_a_database_made_before_the_tool_column_gets_it_on_init(
    emulator_database: EmulatorDatabase,
) -> None:
    old: Any = open_backend(emulator_database.direct_url)
    try:
        create_old_records_table(old, emulator_database.postgres, ("rare_status", "owner"))
        assert old.owner_column is True and old.tool_column is False
        old.transact(lambda tx: [
            tx.put_record("tasks", "a", {"status": "dead", "tool": "refund"}),
            tx.put_record("tasks", "b", {"status": "succeeded", "tool": "ship"}),
            tx.put_record("tasks", "c", {"status": "succeeded", "tool": 3}),
            tx.put_record("runs", "r", {"tool": "refund"}),
            tx.put_record("runs", "s", {"agent": "helper"}),
        ])  # fmt: skip
        # Until init, listings filter the records as before.
        assert [k for k, _ in old.list_records("tasks", where={"tool": ["refund"]})] == ["a"]
    finally:
        old.close()
    upgraded: Any = open_backend(emulator_database.direct_url)
    try:
        upgraded.apply_ddl([])
        assert upgraded.tool_column is True
        rows = list(upgraded.database.snapshot().__enter__().execute_sql(
            f"SELECT tbl, k, tool FROM {upgraded.dialect.records} "
            "WHERE tbl IN ('runs', 'tasks') ORDER BY tbl, k"
        ))  # fmt: skip
        assert [tuple(r) for r in rows] == [
            ("runs", "r", None), ("runs", "s", "helper"), ("tasks", "a", "refund"),
            ("tasks", "b", "ship"),
            ("tasks", "c", None),
        ]  # fmt: skip
        upgraded.transact(lambda tx: tx.put_record("tasks", "d", {"tool": "refund"}))
        refunds = upgraded.list_records("tasks", where={"tool": ["refund"]}, descending=True)
        assert [k for k, _ in refunds] == ["d", "a"]
    finally:
        upgraded.close()


def test_an_agents_runs_walk_the_tool_index_once_init_filled_them(
    emulator_database: EmulatorDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs joined the tool column after the tasks: in a database whose runs
    were stored before (the column there, the runs' agents not in it), an
    agent's runs are filtered as before until ``agentq init`` fills them in;
    then the listing walks the tool index (``GET /v1/runs?agent=...``)."""
    b: Any = open_backend(emulator_database.direct_url)
    try:
        b.apply_ddl([])
        b.transact(lambda tx: [
            tx.put_record("runs", f"r{i:03d}", {
                "status": "awaiting_tools" if i == 7 else "succeeded",
                "agent": "helper" if i % 5 == 2 else "triage", "owner": "ann" if i % 2 else "bob",
                "messages": [{"role": "user", "content": "hi"}]})
            for i in range(40)
        ])  # fmt: skip

        # As the previous release left it: the runs' agents unset, no mark.
        def unset(txn: Any) -> None:
            txn.execute_update(f"UPDATE {b.dialect.records} SET tool = NULL WHERE tbl = 'runs'")
            txn.execute_update(f"DELETE FROM {b.dialect.records} WHERE tbl = 'agentq#marks' "
                               "AND k = 'runs_agent'")  # fmt: skip

        b.database.run_in_transaction(unset)
    finally:
        b.close()
    old: Any = open_backend(emulator_database.direct_url)
    try:
        sent = recording(old, monkeypatch)
        helpers = old.list_records("runs", where={"agent": ["helper"]}, descending=True, limit=3)
        assert [k for k, _ in helpers] == ["r037", "r032", "r027"]
        # Until init, the JSON is filtered (the first read also asks which
        # columns the table has, and whether the runs are marked).
        assert "JSON_VALUE" in sent[-1] or "jsonb" in sent[-1]
        assert not any(old.dialect.tool_index in sql for sql in sent)
        old.apply_ddl([])
        rows = list(old.database.snapshot().__enter__().execute_sql(
            f"SELECT k, tool FROM {old.dialect.records} WHERE tbl = 'runs' ORDER BY k"))
        assert [tuple(r) for r in rows] == [
            (f"r{i:03d}", "helper" if i % 5 == 2 else "triage") for i in range(40)]
        sent.clear()
        helpers = old.list_records("runs", where={"agent": ["helper"]}, descending=True, limit=3)
        assert [k for k, _ in helpers] == ["r037", "r032", "r027"]
        assert len(sent) == 1 and old.dialect.tool_index in sent[0] and "FORCE_INDEX" in sent[0]
        sent.clear()
        none = old.list_records("runs", where={"agent": ["void", "nobody"]})
        assert none == [] and len(sent) == 1 and old.dialect.tool_index in sent[0]
        sent.clear()
        done = old.list_records("runs", where={"agent": ["helper"], "status": ["succeeded"]},
                                limit=2)  # fmt: skip
        assert [k for k, _ in done] == ["r002", "r012"]
        assert len(sent) == 1 and old.dialect.tool_index in sent[0]
        sent.clear()
        # An owner's listing walks the owner's index, a rare status's the
        # rare statuses', and checks the agent on what it reads.
        mine = old.list_records("runs", where={"agent": ["helper"], "owner": ["ann"]})
        assert [k for k, _ in mine] == ["r007", "r017", "r027", "r037"]
        assert len(sent) == 1 and old.dialect.owner_index in sent[0]
        sent.clear()
        parked = old.list_records("runs", where={"agent": ["helper", "triage"],
                                                 "status": ["awaiting_tools"]})  # fmt: skip
        assert [k for k, _ in parked] == ["r007"]
        assert len(sent) == 1 and old.dialect.rare_index in sent[0]
        assert old.runs_named is True
    finally:
        old.close()
