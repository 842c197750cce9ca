"""Spanner keeps the tasks' tools in a column with an index, as SQLite and
PostgreSQL do (issue 38 item 1, ``agentq.backends.tool_column``): a listing
filtered on tools walks the tool index instead of filtering every record's
JSON, and a database an older agentq made gets the column, its tasks' tools
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
            ("runs", "r", None), ("tasks", "a", "refund"), ("tasks", "b", "ship"),
            ("tasks", "c", None),
        ]  # fmt: skip
        upgraded.transact(lambda tx: tx.put_record("tasks", "d", {"tool": "refund"}))
        refunds = upgraded.list_records("tasks", where={"tool": ["refund"]}, descending=True)
        assert [k for k, _ in refunds] == ["d", "a"]
    finally:
        upgraded.close()
