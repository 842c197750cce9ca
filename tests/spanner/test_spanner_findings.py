"""Backend bugs the emulator runs found (``/work/wt/spanner-findings.md`` F1-F3),
pinned against the gRPC mock."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.cloud.spanner_v1 import ExecuteSqlRequest

from agentq import DuplicateKey, InvalidMessage, KeyColumn, KeyType, QueueSpec
from agentq.backends.spanner import SpannerBackend

from .mock_server import rpc_status

Q = QueueSpec("UserTasks", (KeyColumn("UserId", KeyType.INT), KeyColumn("MessageId", KeyType.STR)))
BAD = "task-\udcff"  # what Python makes of the byte 0xff in a command-line argument


def test_f1_duplicate_key_names_the_queue_as_the_application_spells_it(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    svc.mock_spanner.add_error(
        "Commit", rpc_status(grpc.StatusCode.ALREADY_EXISTS, "Table usertasks: Row exists")
    )
    with pytest.raises(DuplicateKey, match="'UserTasks'"):
        backend.transact(lambda tx: tx.send("UserTasks", (1, "a"), b"x"))


def test_f2_reads_under_a_key_that_is_not_unicode_find_nothing(
    backend: SpannerBackend, svc: Any
) -> None:
    svc.records[("ledger", "good")] = json.dumps({"n": 1})
    assert backend.get_record("ledger", BAD) is None
    assert set(backend.read_records("ledger", ["good", BAD])) == {"good"}
    assert backend.list_records("ledger", prefix=BAD) == []
    assert backend.transact(lambda tx: tx.get_record("ledger", BAD)) is None
    assert backend.transact(lambda tx: tx.delete_record("ledger", BAD)) is False
    version = json.dumps({"n": 1})
    stale = backend.transact(lambda tx: tx.replace_records("ledger", [(BAD, version, {})]))
    assert stale == [BAD]


@pytest.mark.parametrize("op", ["put", "insert"])
def test_f2_writes_under_a_key_that_is_not_unicode_are_invalid_message(
    backend: SpannerBackend, svc: Any, op: str
) -> None:
    def fn(tx: Any) -> None:
        tx.put_record("ledger", "good", {"n": 1})
        if op == "put":
            tx.put_record("ledger", BAD, {"n": 2})
        else:
            tx.insert_record("ledger", BAD, {"n": 2})

    with pytest.raises(InvalidMessage, match=r"'ledger'.*UTF-8"):
        backend.transact(fn)
    assert ("ledger", "good") not in svc.records  # nothing committed


def test_f3_read_records_is_one_query_per_chunk_not_per_key(
    backend: SpannerBackend, svc: Any
) -> None:
    for i in range(0, 1200, 2):
        svc.records[("tasks", f"t{i:04}")] = json.dumps({"i": i})
    keys = [f"t{i:04}" for i in range(1200)]
    found = backend.read_records("tasks", keys)
    assert sorted(found) == keys[::2]
    assert found["t0002"].value == {"i": 2} and found["t0002"].version == json.dumps({"i": 2})
    reads = [r for r in svc.of(ExecuteSqlRequest) if "agentq_records" in r.sql]
    assert len(reads) == 3  # 1200 keys in chunks of 500
    marker = "= ANY($2)" if backend.dialect.postgres else "IN UNNEST(@keys)"
    assert all(marker in r.sql for r in reads)
