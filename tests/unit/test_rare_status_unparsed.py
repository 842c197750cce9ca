"""The rare-status column's value of an encoded record, without parsing it again
(issue 38 item 3: every enqueue, and every whole-record claim or completion on
PostgreSQL, wrote a record whose status the writer had just encoded, and parsed
the whole text again to find it; orjson refused the ``str`` subclass, so every
one of those parses raised and went to the standard library's decoder)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import orjson
import pytest

from agentq.backends import EncodedRecord, encode_record, record_text
from agentq.backends.record_filters import record_rare_status
from agentq.statuses import TaskStatus


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the record was parsed again")


@pytest.fixture
def no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_text.orjson, "loads", _refused)
    monkeypatch.setattr(record_text.json, "loads", _refused)


@pytest.mark.parametrize(
    ("table", "status", "rare"),
    [
        ("tasks", TaskStatus.QUEUED, None),
        ("tasks", TaskStatus.WAITING, "waiting"),
        ("tasks", "dead", "dead"),
        ("tasks", None, None),
        ("tasks", 7, None),
        ("approvals", "pending", "pending"),
        ("approvals", "approved", None),
    ],
)
def test_an_encoded_records_status_is_read_without_parsing(
    no_parsing: None, table: str, status: Any, rare: str | None
) -> None:
    encoded = encode_record({"task_id": "t", "status": status, "args": {"status": "dead"}})
    got = record_rare_status(table, encoded)
    assert got == rare and (got is None or type(got) is str)
    # The arguments spliced in after the encoding keep the status it said.
    assert record_rare_status(table, encoded.extended(',"more":{"status":"dead"}')) == rare


def test_what_the_status_says_is_what_parsing_the_text_gives() -> None:
    class Colour(Enum):
        RED = "dead"

    when = datetime(2026, 1, 2, tzinfo=UTC)
    for status in ["dead", TaskStatus.CANCELLED, None, 3, 2.5, [1], {"a": 1}, Colour.RED, when]:
        encoded = encode_record({"status": status})
        parsed = record_rare_status("tasks", EncodedRecord(str(encoded)))
        assert record_rare_status("tasks", encoded) == parsed, status


def test_a_text_without_a_said_status_is_parsed_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_text.json, "loads", _refused)
    text = EncodedRecord(orjson.dumps({"status": "dead"}).decode())
    assert record_rare_status("tasks", text) == "dead"
    assert record_rare_status("tasks", json.dumps({"status": "queued"})) is None
