"""The stored form of a queue's spec (the SQL backends' queues table).

Creating a queue compares this text with the stored one to tell "the same
queue" from "another spec under its name", so its text must never change: an
existing database would otherwise refuse its own queues.
"""

from __future__ import annotations

from datetime import timedelta

from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec, spec_from_json, spec_to_json


def test_the_stored_text_of_a_spec_is_what_earlier_versions_wrote() -> None:
    spec = QueueSpec(
        "orders",
        (KeyColumn("customer", KeyType.STR), KeyColumn("n", KeyType.INT)),
        payload=PayloadType.BYTES,
        ttl=timedelta(hours=2),
    )
    assert spec_to_json(spec) == (
        '{"key": [["customer", "str"], ["n", "int"]], "max_payload_bytes": '
        f'{spec.max_payload_bytes}, "name": "orders", "parent": null, "payload": "bytes", '
        '"ttl": 7200.0}'
    )


def test_a_stored_spec_reads_back_as_the_same_spec() -> None:
    spec = QueueSpec("refunds", (KeyColumn("id", KeyType.STR),), max_payload_bytes=4096)
    assert spec_from_json(spec_to_json(spec)) == spec
