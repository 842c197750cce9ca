"""Records keep exactly the JSON text the runtime encoded, including what
PostgreSQL's ``jsonb`` cannot hold (a NUL character, escaped ``\\u0000``): a
tool's arguments with one in them must not make every later status update of
that task fail."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import encode_fields, open_backend


def test_fields_of_a_record_holding_a_nul_character_can_be_set(postgres_url: str) -> None:
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: tx.put_record("tasks", "t1", {"args": "a\x00b", "status": "queued"}))
        missing = b.transact(
            lambda tx: tx.update_records("tasks", [("t1", encode_fields({"status": "running"}))])
        )
        assert missing == []
        assert b.get_record("tasks", "t1") == {"args": "a\x00b", "status": "running"}
        [stored] = b.read_records("tasks", ["t1"]).values()
        stale = b.transact(
            lambda tx: tx.replace_records(
                "tasks", [("t1", stored.version, encode_fields({"status": "done"}))]
            )
        )
        assert stale == []
        assert b.get_record("tasks", "t1") == {"args": "a\x00b", "status": "done"}
    finally:
        b.close()


def test_setting_fields_keeps_the_other_fields_and_their_order(postgres_url: str) -> None:
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: tx.put_record("tasks", "t1", {"z": 1, "a": [1.0, "x"], "s": None}))
        b.transact(lambda tx: tx.update_records("tasks", [("t1", encode_fields({"s": "ok"}))]))
        record = b.get_record("tasks", "t1")
        assert record == {"z": 1, "a": [1.0, "x"], "s": "ok"}
        assert list(record) == ["z", "a", "s"]
    finally:
        b.close()
