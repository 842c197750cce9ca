"""Request and transaction tags, so a user finds agentq's load in Spanner's query,
transaction and lock statistics (issue 29, defect 7)."""

from __future__ import annotations

from typing import Any

from google.cloud.spanner_v1 import (
    BeginTransactionRequest,
    CommitRequest,
    ExecuteSqlRequest,
    TypeCode,
)

from agentq import KeyColumn, KeyType, QueueSpec
from agentq.backends.spanner import SpannerBackend
from agentq.backends.tags import MAX_TAG, current_tag, make_tag, tagged

from .mock_server import partial, row_type

Q = QueueSpec("UserTasks", (KeyColumn("UserId", KeyType.INT), KeyColumn("MessageId", KeyType.STR)))


def _transaction_tags(svc: Any) -> list[str]:
    tags = [r.request_options.transaction_tag for r in svc.of(BeginTransactionRequest)]
    tags += [r.request_options.transaction_tag for r in svc.of(CommitRequest)]
    return [t for t in tags if t]


def test_a_transaction_carries_the_executors_tag_or_a_default(
    backend: SpannerBackend, svc: Any
) -> None:
    backend.create_queue(Q)
    with tagged("complete", tool="refund", queue="UserTasks"):
        backend.transact(lambda tx: tx.send("UserTasks", (1, "a"), b"x"))
    assert set(_transaction_tags(svc)) == {"agentq op=complete tool=refund queue=UserTasks"}
    svc.clear_requests()
    backend.transact(lambda tx: tx.send("UserTasks", (1, "b"), b"x"))
    assert set(_transaction_tags(svc)) == {"agentq op=transact"}
    assert current_tag() is None  # the block's tag does not outlive it


def test_receive_and_renew_carry_request_tags(backend: SpannerBackend, svc: Any) -> None:
    backend.create_queue(Q)
    md = row_type([("old", TypeCode.STRING), ("new", TypeCode.STRING), ("exp", TypeCode.TIMESTAMP)])
    svc.on_sql(r"RECEIVE_UserTasks|receive_usertasks", partials=[partial([], last=True)])
    svc.on_sql(
        r"RENEWLEASE_UserTasks|renewlease_usertasks", partials=[partial([], metadata=md, last=True)]
    )
    list(backend.stream("UserTasks", max_batch_size=1, max_duration=0))
    backend.renew("UserTasks", ["tok"])
    tags = {
        r.sql.split()[-1][:12]: r.request_options.request_tag for r in svc.of(ExecuteSqlRequest)
    }
    assert set(tags.values()) == {
        "agentq op=due queue=UserTasks",  # the short receive's check for due messages
        "agentq op=receive queue=UserTasks",
        "agentq op=renew queue=UserTasks",
    }


def test_tags_are_printable_and_at_most_fifty_characters() -> None:
    tag = make_tag("complete", tool="t\u00e9l\u00e9phone\n", queue="Q" * 80)
    assert len(tag) == MAX_TAG and tag.isascii() and tag.isprintable()
    assert tag.startswith("agentq op=complete tool=t?l?phone?")
