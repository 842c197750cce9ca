"""The runtime end to end over the Spanner backend and the gRPC mock: one task's
life (enqueue, receive, renew, complete) with every request checked."""

from __future__ import annotations

import json
import threading
from typing import Any

from google.cloud.spanner_v1 import CommitRequest, ExecuteSqlRequest, TypeCode
from google.protobuf.struct_pb2 import Value
from pydantic import BaseModel

from agentq import FakeClock, Runtime, TaskStatus, ToolContext, open_backend, tool
from agentq.clock import to_micros

from .conftest import spanner_url
from .mock_server import partial, row_type, sv

ENTERED = threading.Event()
RELEASE = threading.Event()


class Echo(BaseModel):
    text: str


class Echoed(BaseModel):
    text: str
    attempt: int


@tool(queue="work")
def echo(ctx: ToolContext, args: Echo) -> Echoed:
    ENTERED.set()
    RELEASE.wait(10)
    return Echoed(text=args.text.upper(), attempt=ctx.attempt)


def test_one_task_life_over_spanner(mock_server: Any, svc: Any) -> None:
    clock = FakeClock()
    backend = open_backend(spanner_url(mock_server[2]), clock=clock)
    rt = Runtime(backend, tools=[echo])

    # 1. Enqueue: ledger record and the send mutation commit together.
    task = rt.enqueue_action("echo", {"text": "hello"}, idempotency_key="call-1")
    # Random ids: ids growing with time would send every insert to one split.
    assert int(task.task_id[4:18], 16) != to_micros(clock.now())
    (commit,) = svc.of(CommitRequest)
    ops = [CommitRequest.pb(commit).mutations[i].WhichOneof("operation")
           for i in range(len(commit.mutations))]  # fmt: skip
    assert sorted(ops) == ["insert_or_update", "insert_or_update", "send"]
    send = next(m.send for m in commit.mutations if "send" in m)
    assert send.queue == "work" and list(send.key) == [task.task_id, "1"]
    envelope = json.loads(send.payload)
    # The envelope names the task; its arguments are stored once, in its record.
    assert envelope["tool"] == "echo" and envelope["v"] == 2 and "args" not in envelope
    assert json.loads(svc.records[("tasks", task.task_id)])["args"] == {"text": "hello"}
    assert json.loads(svc.records[("tasks", task.task_id)])["status"] == "queued"
    assert (
        rt.enqueue_action("echo", {"text": "hello"}, idempotency_key="call-1").task_id
        == task.task_id
    )

    # 2. Receive: the mock hands the sent message back once, as RECEIVE would.
    md = row_type([("task_id", TypeCode.STRING), ("attempt", TypeCode.INT64),
                   ("Payload", TypeCode.JSON), ("DeliverTime", TypeCode.TIMESTAMP),
                   ("SpannerLeaseExpirationTimestamp", TypeCode.TIMESTAMP),
                   ("SpannerLeaseToken", TypeCode.STRING),
                   ("SpannerLastBatchMessage", TypeCode.BOOL)])  # fmt: skip
    delivered = []

    def receive(request: Any, context: Any) -> Any:
        if not delivered:
            delivered.append(request.sql)
            yield partial([sv(task.task_id), sv("1"), sv(send.payload),
                           sv("2026-01-01T00:00:00Z"), sv("2026-01-01T00:00:10Z"),
                           sv("lease-1"), Value(bool_value=True)], metadata=md, last=True)  # fmt: skip
        else:
            yield partial([], metadata=md, last=True)

    svc.on_sql(r"FROM RECEIVE_work\(", stream=receive)
    renew_md = row_type([("SpannerOldLeaseToken", TypeCode.STRING),
                         ("SpannerNewLeaseToken", TypeCode.STRING),
                         ("SpannerLeaseExpirationTimestamp", TypeCode.TIMESTAMP)])  # fmt: skip
    svc.on_sql(
        r"RENEWLEASE_work",
        partials=[
            partial(
                [sv("lease-1"), sv("lease-2"), sv("2026-01-01T00:00:18Z")],
                metadata=renew_md,
                last=True,
            )
        ],
    )

    worker = rt.worker(queues=["work"], monitor_interval=1.0)
    runner = threading.Thread(target=worker.drain)
    runner.start()
    assert ENTERED.wait(10)
    assert json.loads(svc.records[("tasks", task.task_id)])["status"] == "running"

    # 3. Renew: the handler runs long; the monitor renews at ~7.5 s of the 10 s lease.
    for _ in range(8):
        clock.wait_for_sleepers(1)
        clock.advance(1)
    clock.wait_for_sleepers(1)
    renewals = [r for r in svc.of(ExecuteSqlRequest) if "RENEWLEASE_work" in r.sql]
    assert renewals and list(renewals[0].params["tokens"]) == ["lease-1"]

    # 4. Complete: result, ledger and a strict ack commit in one transaction.
    RELEASE.set()
    runner.join(10)
    assert worker.stats["succeeded"] == 1 and worker.stats["renewed"] >= 1
    final = svc.of(CommitRequest)[-1]
    acks = [m.ack for m in final.mutations if "ack" in m]
    assert [(a.queue, list(a.key), a.ignore_not_found) for a in acks] == [
        ("work", [task.task_id, "1"], False)
    ]
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.SUCCEEDED
    assert info.result == {"text": "HELLO", "attempt": 1}
    rt.close()
    backend.close()
