"""The prebuilt encoders give exactly the text the json.dumps calls they replace gave:
stored arguments, payloads and idempotency digests must not change."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agentq.idempotency import args_digest
from agentq.jsontext import canonical, compact

VALUES: list[Any] = [
    {},
    [],
    "",
    0,
    -1.5,
    1e300,
    None,
    True,
    {"b": 1, "a": [1, 2, {"d": None, "c": "x"}]},
    {"note": 'café ✓ \u0000 \ud83d\ude00 "quoted" \\ /', "n": 12.5},
    [["nested", ["deep", [{"k": False}]]]],
    {"1": 1, "10": 2, "2": 3, "é": 4, "Z": 5, "a": 6},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_compact_is_json_dumps_compact(value: Any) -> None:
    assert compact(value) == json.dumps(value, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_canonical_is_json_dumps_sorted(value: Any) -> None:
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"x": [math.nan]}])
def test_compact_refuses_nan_and_infinity(bad: Any) -> None:
    with pytest.raises(ValueError):
        compact(bad)


def test_compact_is_ascii_so_its_length_is_its_size_in_bytes() -> None:
    text = compact({"note": "café ✓ 😀"})
    assert text.isascii()
    assert len(text) == len(text.encode())


def test_idempotency_digest_of_a_call_is_unchanged() -> None:
    # Keys remembered before the encoder change must still match the same call.
    call = {
        "order": "A-1",
        "amount": 12.5,
        "note": "café ✓",
        "items": [3, 1, 2],
        "meta": {"z": None, "a": True},
    }
    assert args_digest("refund", call) == (
        "746665edd8ab0fcae55c30ba992a0aac380924d91ecfe3b98077d68cb679beb6"
    )
    reordered = dict(reversed(list(call.items())))
    assert args_digest("refund", reordered) == args_digest("refund", call)
