"""The rare status of a whole record written as an :class:`EncodedRecord` (every
plain success and claim a worker writes) is read with orjson, not with the
standard library's decoder after orjson refused the text: orjson takes only an
exact ``str``, and an ``EncodedRecord`` is a subclass (found profiling the
PostgreSQL worker: a tenth of its CPU went to that fallback)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentq.backends.base import EncodedRecord, encode_record
from agentq.backends.record_filters import record_rare_status


def test_an_encoded_record_is_parsed_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the standard library's decoder read an EncodedRecord")

    monkeypatch.setattr(json, "loads", refuse)
    record = encode_record({"task_id": "t", "status": "dead", "n": 1})
    assert isinstance(record, EncodedRecord)
    assert record_rare_status("tasks", record) == "dead"
    assert record_rare_status("tasks", encode_record({"status": "succeeded"})) is None


def test_what_orjson_cannot_read_still_gets_its_status() -> None:
    # NaN is no JSON orjson reads: the standard library's decoder still does.
    assert record_rare_status("tasks", EncodedRecord('{"status":"dead","x":NaN}')) == "dead"
