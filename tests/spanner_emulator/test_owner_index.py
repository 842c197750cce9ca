"""Spanner keeps the tasks' owners in a column with indexes, as SQLite and
PostgreSQL do (issue 38 item 1, ``agentq.backends.owners``): an agent's own
listing walks the owner index instead of filtering every record's JSON, its
count is counted from the index, and a database an older agentq made gets the
column, its tasks' owners and the indexes from ``agentq init``
(``apply_ddl``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentq import open_backend
from agentq.backends import Backend

from .fixtures import EmulatorDatabase
from .old_tables import create_old_records_table
from .snapshots import recording


def test_an_owners_listing_and_count_walk_its_index(
    records_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    b: Any = records_backend
    b.transact(lambda tx: [
        tx.put_record("tasks", f"t{i:03d}", {"status": "dead" if i % 7 == 0 else "succeeded",
                                             "created_by": "ann" if i % 25 == 3 else "bob"})
        for i in range(150)
    ])  # fmt: skip
    sent = recording(b, monkeypatch)
    listed = b.list_records("tasks", where={"created_by": ["ann"]}, descending=True, limit=3)
    assert [k for k, _ in listed] == ["t128", "t103", "t078"]
    assert len(sent) == 1 and b.dialect.owner_index in sent[0] and "FORCE_INDEX" in sent[0]
    sent.clear()
    dead = b.list_records("tasks", where={"created_by": ["ann", "carl"], "status": ["dead"]})
    assert [k for k, _ in dead] == ["t028"]
    assert len(sent) == 1 and b.dialect.owner_rare_index in sent[0]
    sent.clear()
    assert b.record_count("tasks", owner="ann") == 6
    assert len(sent) == 1 and b.dialect.owner_index in sent[0]


def test_a_database_made_before_the_owner_column_gets_it_on_init(
    emulator_database: EmulatorDatabase,
) -> None:
    old: Any = open_backend(emulator_database.direct_url)
    try:
        create_old_records_table(old, emulator_database.postgres, ("rare_status",))
        assert old.rare_column is True and old.owner_column is False
        old.transact(lambda tx: [
            tx.put_record("tasks", "a", {"status": "dead", "created_by": "ann"}),
            tx.put_record("tasks", "b", {"status": "succeeded", "created_by": "ann"}),
            tx.put_record("tasks", "c", {"status": "succeeded", "created_by": 3}),
            tx.put_record("runs", "r", {"created_by": "ann"}),
        ])  # fmt: skip
        # Until init, listings and counts filter the records as before.
        assert [k for k, _ in old.list_records("tasks", where={"created_by": ["ann"]})] == [
            "a", "b"]  # fmt: skip
        assert old.record_count("tasks", owner="ann") == 2
    finally:
        old.close()
    upgraded: Any = open_backend(emulator_database.direct_url)
    try:
        upgraded.apply_ddl([])
        assert upgraded.owner_column is True
        rows = list(upgraded.database.snapshot().__enter__().execute_sql(
            f"SELECT tbl, k, owner FROM {upgraded.dialect.records} "
            "WHERE tbl IN ('runs', 'tasks') ORDER BY tbl, k"
        ))  # fmt: skip
        assert [tuple(r) for r in rows] == [
            ("runs", "r", None), ("tasks", "a", "ann"), ("tasks", "b", "ann"), ("tasks", "c", None),
        ]  # fmt: skip
        dead = upgraded.list_records("tasks", where={"created_by": ["ann"], "status": ["dead"]})
        assert [k for k, _ in dead] == ["a"]
        assert upgraded.record_count("tasks", owner="ann") == 2
    finally:
        upgraded.close()


def test_an_owners_runs_walk_the_owner_index_once_init_filled_them(
    emulator_database: EmulatorDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs joined the owner column after the tasks: in a database whose runs
    were stored before (the column there, the runs' owners not in it), an
    owner's runs are filtered as before until ``agentq init`` fills them in;
    then the listing walks the owner index."""
    b: Any = open_backend(emulator_database.direct_url)
    try:
        b.apply_ddl([])
        b.transact(lambda tx: [
            tx.put_record("runs", f"r{i:03d}", {"status": "awaiting_tools" if i == 7 else
                                                "succeeded", "owner": "ann" if i % 5 == 2 else
                                                "bob"})
            for i in range(40)
        ])  # fmt: skip
        # As the previous release left it: the runs' owners unset, no mark.
        def unset(txn: Any) -> None:
            txn.execute_update(f"UPDATE {b.dialect.records} SET owner = NULL WHERE tbl = 'runs'")
            txn.execute_update(f"DELETE FROM {b.dialect.records} WHERE tbl = 'agentq#marks' "
                               "AND k = 'runs_owner'")  # fmt: skip

        b.database.run_in_transaction(unset)
    finally:
        b.close()
    old: Any = open_backend(emulator_database.direct_url)
    try:
        assert old.owner_column is True and old.runs_owned is False
        sent = recording(old, monkeypatch)
        mine = old.list_records("runs", where={"owner": ["ann"]}, descending=True, limit=3)
        assert [k for k, _ in mine] == ["r037", "r032", "r027"]
        # (the first read also asks which columns the table has)
        assert "JSON_VALUE" in sent[-1] or "jsonb" in sent[-1]
        assert not any(old.dialect.owner_index in sql for sql in sent)
        old.apply_ddl([])
        assert old.runs_owned is True
        sent.clear()
        mine = old.list_records("runs", where={"owner": ["ann"]}, descending=True, limit=3)
        assert [k for k, _ in mine] == ["r037", "r032", "r027"]
        assert len(sent) == 1 and old.dialect.owner_index in sent[0]
        sent.clear()
        parked = old.list_records("runs", where={"owner": ["ann", "bob"],
                                                 "status": ["awaiting_tools"]})  # fmt: skip
        assert [k for k, _ in parked] == ["r007"]
        assert len(sent) == 1 and old.dialect.owner_rare_index in sent[0]
    finally:
        old.close()
