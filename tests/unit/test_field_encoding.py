"""``encode_fields`` encodes each value as ``encode_record`` does inside a record:
a completion that writes only its changed fields stores what writing the whole
record stores (the fast path and the careful one must not disagree)."""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from agentq.backends import encode_fields, encode_record


class Colour(enum.Enum):
    RED = 1


class Status(enum.StrEnum):
    DONE = "done"


@dataclasses.dataclass
class Point:
    x: int
    y: float


VALUES: list[Any] = [
    None, True, 0, -(2**63), 2**64 - 1, 2**70, -(2**90), 0.1, 1e16, -0.0, 5e-324,
    "", "naïve ✓ 😀 \u0000 \"q\" \\", "\ud800 unpaired", Status.DONE, Colour.RED,
    datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), uuid.UUID(int=7), Point(1, 2.5),
    {"nested": [1, {"deep": None}], "ratio": 0.30000000000000004, "ok": False},
    {1: "int key", None: "none key"}, [2**70, "é"], (1, 2),
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_field_is_encoded_as_inside_a_whole_record(value: Any) -> None:
    encoded = encode_fields({"f": value})
    assert encoded.names == ("f",)
    whole = json.loads(encode_record({"f": value}))["f"]
    assert repr(json.loads(encoded.values[0])) == repr(whole)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"r": [1, float("-inf")]}])
def test_a_field_no_json_holds_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        encode_fields({"result": bad})
