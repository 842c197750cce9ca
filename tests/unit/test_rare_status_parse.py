"""The rare status of a record given as its text (every task write on both SQL
backends) is read with orjson, never the standard library's parser: orjson
refuses a ``str`` subclass, and :class:`EncodedRecord` is one, so every task
write fell back to ``json.loads`` of its whole record (issue 38: Python per task)."""

from __future__ import annotations

import json

import pytest

from agentq.backends.base import EncodedRecord, encode_record, record_rare_status


def test_an_encoded_record_is_parsed_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kw: object) -> object:
        raise AssertionError("json.loads of an encoded record")

    monkeypatch.setattr(json, "loads", refused)
    text = encode_record({"task_id": "t", "status": "dead", "args": {"n": 1}})
    assert isinstance(text, EncodedRecord)
    assert record_rare_status("tasks", text) == "dead"
    assert record_rare_status("tasks", EncodedRecord('{"status":"queued"}')) is None
    assert record_rare_status("approvals", '{"status":"pending"}') == "pending"
