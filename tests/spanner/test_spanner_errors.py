"""Error mapping and rollback of Spanner transactions (issue 10, defects 3 and 4).

Only the ack's own failure is MessageNotFound and only the assert's own statement
counts as a failed at-most-once ack; everything else is a TransactionError with
the client's error kept as the cause. Every exception leaving the function sends
a Rollback, API errors included.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.cloud.spanner_v1 import CommitRequest, RollbackRequest

from agentq import KeyColumn, KeyType, MessageNotFound, QueueSpec, TransactionError
from agentq.backends.spanner import SpannerBackend
from agentq.errors import DuplicateKey

from .mock_server import rpc_status, update_count

Q = QueueSpec("UserTasks", (KeyColumn("UserId", KeyType.INT), KeyColumn("MessageId", KeyType.STR)))


def _update(backend: SpannerBackend) -> str:
    return "UPDATE Orders SET State = 'x' WHERE Id = 1"


def test_not_found_naming_a_table_at_commit_is_not_message_not_found(
    backend: SpannerBackend, svc: Any
) -> None:
    """Told by the queue's absence (checked once), not by the wording (issue 29)."""
    backend.create_queue(Q)
    gone = rpc_status(grpc.StatusCode.INVALID_ARGUMENT, "Table not found: UserTasks")
    svc.on_sql(r"^SELECT 1 FROM UserTasks LIMIT 1$", error=gone)
    svc.mock_spanner.add_error(
        "Commit", rpc_status(grpc.StatusCode.NOT_FOUND, "Table not found: UserTasks")
    )
    with pytest.raises(TransactionError) as info:
        backend.transact(lambda tx: tx.ack("UserTasks", (1, "m")))
    assert not isinstance(info.value, MessageNotFound)
    assert isinstance(info.value.__cause__, gexc.NotFound)
    assert "Table not found" in str(info.value)


def test_not_found_from_a_statement_is_not_message_not_found(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    svc.on_sql(r"^UPDATE Orders", result=update_count(1))
    svc.on_sql(r"^SELECT \* FROM Missing", error=rpc_status(grpc.StatusCode.NOT_FOUND, "Row gone"))

    def fn(tx: Any) -> None:
        tx.ack("UserTasks", (1, "m"))
        tx.execute(_update(backend))
        tx.execute("SELECT * FROM Missing")

    with pytest.raises(TransactionError) as info:
        backend.transact(fn)
    assert not isinstance(info.value, MessageNotFound)
    assert isinstance(info.value.__cause__, gexc.NotFound)
    assert commits(svc) == []


def test_out_of_range_from_application_sql_is_a_transaction_error(
    backend: SpannerBackend, svc: Any
) -> None:
    """On the emulator ``SELECT 1/0`` came back as a stale completion: redelivered."""
    backend.create_queue(Q)
    svc.on_sql(r"^UPDATE Orders", result=update_count(1))
    svc.on_sql(r"^SELECT 1/0", error=rpc_status(grpc.StatusCode.OUT_OF_RANGE, "division by zero"))

    def fn(tx: Any) -> None:
        tx.execute(_update(backend))
        tx.execute("SELECT 1/0")

    with pytest.raises(TransactionError) as info:
        backend.transact(fn)
    assert not isinstance(info.value, MessageNotFound)
    assert isinstance(info.value.__cause__, gexc.OutOfRange)


def test_failed_assert_rows_modified_is_message_not_found_even_if_caught(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    svc.on_sql(r"^UPDATE Orders", result=update_count(1))
    svc.on_sql(
        r"ASSERT_ROWS_MODIFIED",
        error=rpc_status(grpc.StatusCode.OUT_OF_RANGE, "ASSERT_ROWS_MODIFIED expected 1 got 0"),
    )

    def fn(tx: Any) -> None:
        tx.execute(_update(backend))
        try:
            tx.execute("DELETE FROM UserTasks WHERE UserId = 1 ASSERT_ROWS_MODIFIED 1")
        except MessageNotFound:
            pass  # an application must not carry on; the backend makes sure of it
        tx.send("UserTasks", (1, "next"), b"x")

    with pytest.raises(MessageNotFound, match="ASSERT_ROWS_MODIFIED"):
        backend.transact(fn)
    assert commits(svc) == []
    assert len(svc.of(RollbackRequest)) == 1


def test_already_exists_from_application_sql_is_not_duplicate_key(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    svc.on_sql(
        r"^INSERT INTO Orders", error=rpc_status(grpc.StatusCode.ALREADY_EXISTS, "Row exists")
    )
    with pytest.raises(TransactionError) as info:
        backend.transact(lambda tx: tx.execute("INSERT INTO Orders (Id) VALUES (1)"))
    assert not isinstance(info.value, DuplicateKey)


def test_google_api_error_in_the_function_sends_rollback(backend: SpannerBackend, svc: Any) -> None:
    """The client re-raises GoogleAPICallError without a Rollback: locks would be held
    until Spanner's idle timeout."""
    backend.create_queue(Q)
    svc.on_sql(r"^UPDATE Orders", result=update_count(1))
    svc.on_sql(r"^UPDATE Missing", error=rpc_status(grpc.StatusCode.INVALID_ARGUMENT, "bad column"))

    def fn(tx: Any) -> None:
        tx.execute(_update(backend))  # begins the transaction: it now holds locks
        tx.send("UserTasks", (1, "m"), b"x")
        tx.execute("UPDATE Missing SET X = 1 WHERE Id = 1")

    with pytest.raises(TransactionError) as info:
        backend.transact(fn)
    assert isinstance(info.value.__cause__, gexc.InvalidArgument)
    assert commits(svc) == []
    assert len(svc.of(RollbackRequest)) == 1


def test_api_error_caught_by_the_function_still_commits_what_it_chose(
    backend: SpannerBackend, svc: Any
) -> None:
    """Rollback is for errors *leaving* the function; a caught one is the app's call."""
    backend.create_queue(Q)
    svc.on_sql(r"^UPDATE Orders", result=update_count(1))
    svc.on_sql(r"^SELECT missing", error=rpc_status(grpc.StatusCode.INVALID_ARGUMENT, "bad"))

    def fn(tx: Any) -> str:
        tx.execute(_update(backend))
        try:
            tx.execute("SELECT missing")
        except gexc.InvalidArgument:
            pass
        tx.send("UserTasks", (1, "m"), b"x")
        return "ok"

    assert backend.transact(fn) == "ok"
    assert len(commits(svc)) == 1 and svc.of(RollbackRequest) == []


def commits(svc: Any) -> list[Any]:
    return svc.of(CommitRequest)
