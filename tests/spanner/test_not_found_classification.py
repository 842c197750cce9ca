"""A stale strict ack is told by status code and structured details, never by the
wording of the message (issue 29, defect 3).

Each case is a commit error of a transaction that acked ``UserTasks`` strictly,
as the mock server sends it (status, message, ``grpc-status-details-bin``), and
the answer of the once-per-queue existence check (a ``SELECT`` on the queue).
Several wordings per code: Spanner's texts are not documented, so none of them
may change the answer.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.cloud.spanner_v1 import ResultSet
from google.cloud.spanner_v1.types import TypeCode
from google.rpc.error_details_pb2 import ResourceInfo

from agentq import KeyColumn, KeyType, MessageNotFound, QueueSpec, TransactionError
from agentq.backends.spanner import SpannerBackend
from agentq.errors import DuplicateKey

from .mock_server import row_type, rpc_status, sv

Q = QueueSpec("UserTasks", (KeyColumn("UserId", KeyType.INT), KeyColumn("MessageId", KeyType.STR)))
SESSION = "type.googleapis.com/google.spanner.v1.Session"
DATABASE = "type.googleapis.com/google.spanner.admin.database.v1.Database"
NOT_FOUND = grpc.StatusCode.NOT_FOUND

#: Wordings a missing message might plausibly have; the old regex took the
#: ones naming "queue" or "table" before "not found" for a schema error.
MESSAGE_WORDINGS = [
    "Message not found",
    "Queue message not found: UserTasks(1, 'gone')",
    "Message for queue UserTasks not found",
    "Row not found in table UserTasks",
    "Table UserTasks: row [1, gone] not found",
    "Key (1, 'gone') of queue UserTasks not found",
    "",
]
#: Wordings of a queue that is gone (the existence check then says so).
MISSING_QUEUE_WORDINGS = [
    "Table not found: UserTasks",
    "Queue not found: UserTasks",
    "UserTasks does not exist",
    "Message not found",
]

CASES: list[tuple[str, Any, type[Exception]]] = [
    *((f"stale ack: {w!r}", rpc_status(NOT_FOUND, w), MessageNotFound) for w in MESSAGE_WORDINGS),
    *(
        (
            f"lost session: {w!r}",
            rpc_status(
                NOT_FOUND, w, details=[ResourceInfo(resource_type=SESSION, resource_name="s/1")]
            ),
            TransactionError,
        )
        for w in (
            "Session not found: projects/p/instances/i/databases/d/sessions/s1",
            "Message not found",
            "",
        )
    ),
    *(
        (
            f"database gone: {w!r}",
            rpc_status(NOT_FOUND, w, details=[ResourceInfo(resource_type=DATABASE)]),
            TransactionError,
        )
        for w in ("Database not found: projects/p/instances/i/databases/d", "Row not found")
    ),
    *(
        (f"other code: {c.name} {w!r}", rpc_status(c, w), TransactionError)
        for c in (
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.OUT_OF_RANGE,
        )
        for w in ("Message not found", "Queue message not found")
    ),
]


def _queue_exists(svc: Any) -> None:
    md = row_type([("x", TypeCode.INT64)])
    svc.on_sql(
        r"^SELECT 1 FROM UserTasks LIMIT 1$", result=ResultSet(metadata=md, rows=[[sv("1")]])
    )


@pytest.mark.parametrize(("status", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_commit_not_found_is_classified_by_code_and_details(
    backend: SpannerBackend, svc: Any, status: Any, expected: type[Exception]
) -> None:
    backend.create_queue(Q)
    _queue_exists(svc)
    svc.mock_spanner.add_error("Commit", status)
    with pytest.raises(TransactionError) as info:
        backend.transact(lambda tx: tx.ack("UserTasks", (1, "gone")))
    if expected is MessageNotFound:
        assert isinstance(info.value, MessageNotFound), info.value
    else:
        assert not isinstance(info.value, MessageNotFound), info.value


@pytest.mark.parametrize("wording", MISSING_QUEUE_WORDINGS)
def test_a_not_found_when_the_queue_is_gone_names_the_queue(
    backend: SpannerBackend, svc: Any, wording: str
) -> None:
    backend.create_queue(Q)
    gone = rpc_status(grpc.StatusCode.INVALID_ARGUMENT, "Table not found: UserTasks")
    check = svc.on_sql(r"^SELECT 1 FROM UserTasks LIMIT 1$", error=gone)
    svc.mock_spanner.add_error("Commit", rpc_status(NOT_FOUND, wording))
    with pytest.raises(TransactionError, match="queue 'UserTasks' does not exist") as info:
        backend.transact(lambda tx: tx.ack("UserTasks", (1, "gone")))
    assert not isinstance(info.value, MessageNotFound)
    assert check.hits == 1


def test_the_queue_is_checked_once(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    _queue_exists(svc)
    for _ in range(3):
        svc.mock_spanner.add_error("Commit", rpc_status(NOT_FOUND, "Message not found"))
        with pytest.raises(MessageNotFound):
            backend.transact(lambda tx: tx.ack("UserTasks", (1, "gone")))
    checks = [
        r for r in svc.requests if "select 1 from usertasks" in str(getattr(r, "sql", "")).lower()
    ]
    assert len(checks) == 1


def test_already_exists_stays_a_duplicate_key_whatever_its_wording(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    for wording in ("exists", "Row [1,dup] in table UserTasks already exists", ""):
        svc.mock_spanner.add_error("Commit", rpc_status(grpc.StatusCode.ALREADY_EXISTS, wording))
        with pytest.raises(DuplicateKey):
            backend.transact(lambda tx: tx.send("UserTasks", (1, "dup"), b"x"))
