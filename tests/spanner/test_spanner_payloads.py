"""JSON payloads of any JSON type survive RECEIVE (issue 10, defect 5)."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.spanner_v1 import TypeCode
from google.protobuf.struct_pb2 import Value

from agentq import PayloadType, QueueSpec
from agentq.backends.spanner import SpannerBackend

from .mock_server import partial, row_type, sv

J = QueueSpec.simple("Jobs", payload=PayloadType.JSON)


def _md(postgres: bool) -> Any:
    names = (
        ["id", "payload", "deliver_time", "spanner_lease_expiration_timestamp",
         "spanner_lease_token", "spanner_last_batch_message"]
        if postgres else
        ["id", "Payload", "DeliverTime", "SpannerLeaseExpirationTimestamp",
         "SpannerLeaseToken", "SpannerLastBatchMessage"]
    )  # fmt: skip
    codes = [TypeCode.STRING, TypeCode.JSON, TypeCode.TIMESTAMP, TypeCode.TIMESTAMP,
             TypeCode.STRING, TypeCode.BOOL]  # fmt: skip
    return row_type(list(zip(names, codes, strict=True)))


@pytest.mark.parametrize(
    "text, value",
    [("[1,2,3]", [1, 2, 3]), ('"text"', "text"), ("42", 42), ("null", None),
     ('{"a":[1,{"b":null}]}', {"a": [1, {"b": None}]}), ("[]", []), ("{}", {}),
     ("true", True), ("1.5", 1.5)],
)  # fmt: skip
def test_json_payloads_of_any_type_are_received(
    backend: SpannerBackend, svc: Any, text: str, value: Any
) -> None:
    backend.create_queue(J)
    row = [sv("j1"), sv(text), sv("2026-05-01T12:00:00Z"), sv("2026-05-01T12:00:10Z"),
           sv("tok"), Value(bool_value=True)]  # fmt: skip
    svc.on_sql(
        r"RECEIVE_Jobs|receive_jobs",
        partials=[partial(row, metadata=_md(backend.dialect.postgres), last=True)],
    )
    [[message]] = list(backend.stream("Jobs", max_batch_size=1, max_duration=0))
    assert message.payload == value
