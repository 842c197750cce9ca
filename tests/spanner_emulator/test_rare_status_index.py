"""Spanner keeps the rare statuses in a column with an index, as SQLite and
PostgreSQL do (issue 38 item 1: "on every backend"): a listing of dead tasks
walks the index instead of filtering every record's JSON, and a database an
older agentq made gets the column, its rare records' values and the index from
``agentq init`` (``apply_ddl``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentq import open_backend
from agentq.backends import Backend

from .fixtures import EmulatorDatabase
from .old_tables import create_old_records_table
from .snapshots import recording


def _table(b: Any) -> str:
    return str(b.dialect.records)


def _set_column(b: Any, key: str, value: str | None) -> None:
    """Write the column of one task's row directly (as no agentq would)."""
    d = b.dialect
    names = ["value", "key"]
    v, k = d.params(names)
    sql = f"UPDATE {_table(b)} SET rare_status = {v} WHERE tbl = 'tasks' AND k = {k}"
    b.database.run_in_transaction(
        lambda txn: txn.execute_update(sql, params=d.param_dict(names, [value, key]))
    )



def test_a_listing_by_rare_status_walks_the_index(
    records_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    b: Any = records_backend
    b.transact(lambda tx: [
        tx.put_record("tasks", f"t{i:03d}", {"status": "dead" if i % 50 == 7 else "succeeded"})
        for i in range(150)
    ])  # fmt: skip
    sent = recording(b, monkeypatch)
    listed = b.list_records("tasks", where={"status": ["dead"]}, limit=10)
    assert [k for k, _ in listed] == ["t007", "t057", "t107"]
    assert len(sent) == 1 and b.dialect.rare_index in sent[0] and "FORCE_INDEX" in sent[0]
    two = b.list_records("tasks", where={"status": ["dead", "cancelled"]}, descending=True)
    assert [k for k, _ in two] == ["t107", "t057", "t007"]
    monkeypatch.undo()
    # The listing reads the column, not the records' JSON: a row whose column
    # was cleared behind agentq's back is no longer listed, and a stale value
    # (the record's status changed by a writer that does not keep the column)
    # is read and dropped, never listed under a status its record lacks.
    _set_column(b, "t057", None)
    _set_column(b, "t001", "dead")
    assert [k for k, _ in b.list_records("tasks", where={"status": ["dead"]})] == ["t007", "t107"]
    # A filter on a common status still scans the records (no index holds them).
    assert len(b.list_records("tasks", where={"status": ["succeeded"]})) == 147


def test_a_database_made_before_the_column_gets_it_filled_on_init(
    emulator_database: EmulatorDatabase,
) -> None:
    old: Any = open_backend(emulator_database.direct_url)
    try:
        create_old_records_table(old, emulator_database.postgres)
        assert old.rare_column is False  # an older agentq's table: written as it would
        old.transact(lambda tx: [
            tx.put_record("tasks", "a", {"status": "dead"}),
            tx.put_record("tasks", "b", {"status": "succeeded"}),
            tx.put_record("approvals", "c", {"status": "pending"}),
            tx.put_record("approvals", "d", {"status": "approved"}),
        ])  # fmt: skip
        # Until init, listings filter the records as before.
        assert [k for k, _ in old.list_records("tasks", where={"status": ["dead"]})] == ["a"]
    finally:
        old.close()
    upgraded: Any = open_backend(emulator_database.direct_url)
    try:
        upgraded.apply_ddl([])
        assert upgraded.rare_column is True
        rows = list(upgraded.database.snapshot().__enter__().execute_sql(
            f"SELECT tbl, k, rare_status FROM {_table(upgraded)} "
            "WHERE tbl IN ('tasks', 'approvals') ORDER BY tbl, k"
        ))  # fmt: skip
        assert [tuple(r) for r in rows] == [
            ("approvals", "c", "pending"), ("approvals", "d", None),
            ("tasks", "a", "dead"), ("tasks", "b", None),
        ]  # fmt: skip
        listed = upgraded.list_records("approvals", where={"status": ["pending"]})
        assert [k for k, _ in listed] == ["c"]
    finally:
        upgraded.close()


def test_runs_stored_before_they_joined_the_index_get_theirs_on_init(
    records_backend: Backend, emulator_database: EmulatorDatabase
) -> None:
    """A database whose column came before the runs joined the index: until
    ``agentq init`` its runs are listed by their key order's walk (right, if
    slower); init fills the rare statuses of the runs stored before, marks
    it, and listings of parked runs then walk the index."""
    b: Any = records_backend
    b.transact(lambda tx: [tx.put_record("runs", k, {"status": s}) for k, s in
                           (("r1", "awaiting_tools"), ("r2", "succeeded"),
                            ("r3", "failed"), ("r4", "queued"))])  # fmt: skip
    # As the release before left it: the runs' column unset, no mark.
    b.database.run_in_transaction(lambda txn: (
        txn.execute_update(f"UPDATE {_table(b)} SET rare_status = NULL WHERE tbl = 'runs'"),
        txn.execute_update(f"DELETE FROM {_table(b)} WHERE tbl = 'agentq#marks'")))  # fmt: skip
    before: Any = open_backend(emulator_database.direct_url)
    try:
        assert before.runs_in_index is False
        parked = {"status": ["awaiting_tools", "failed"]}
        assert [k for k, _ in before.list_records("runs", where=parked)] == ["r1", "r3"]
        before.apply_ddl([])
        assert before.runs_in_index is True
        assert [k for k, _ in before.list_records("runs", where=parked)] == ["r1", "r3"]
        rows = list(before.database.snapshot().__enter__().execute_sql(
            f"SELECT k, rare_status FROM {_table(before)} WHERE tbl = 'runs' ORDER BY k"))
        assert [tuple(r) for r in rows] == [("r1", "awaiting_tools"), ("r2", None),
                                            ("r3", "failed"), ("r4", "queued")]  # fmt: skip
    finally:
        before.close()
