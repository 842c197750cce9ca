"""The prebuilt encoders give exactly the text the json.dumps calls they replace gave:
stored arguments, payloads and idempotency digests must not change."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentq.idempotency import args_digest
from agentq.jsontext import canonical, compact, decode

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


# -- decode: orjson where it gives json.loads' value, json.loads elsewhere -------------

TEXTS = [
    '{"b":1,"a":2,"b":3}',  # key order, and the last of a repeated key
    '{"note":"café ✓ \\u00e9 \\ud83d\\ude00 \\u0000"}',
    '"\\ud800"',  # an unpaired surrogate: orjson refuses, json.loads keeps it
    "NaN",
    "[Infinity,-Infinity]",
    "1e400",
    "-1e400",
    "1e-400",
    "-0",
    "-0.0",
    "0.1",
    "1.7976931348623157e308",
    "5e-324",
    "1e16",
    "12345678.90123456789",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    # Beyond 64 bits: orjson would read these as floats.
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    '{"n":123456789012345678901234567890,"m":[-99999999999999999999]}',
    '{"id":"1234567890123456789012345"}',  # a long digit run in a string: still equal
    " [1, 2 ,\n3] ",
]


@pytest.mark.parametrize("text", TEXTS)
def test_decode_is_json_loads(text: str) -> None:
    expected = json.loads(text)
    got = decode(text)
    assert repr(got) == repr(expected)  # floats and ints apart, NaN equal to itself
    assert repr(decode(text.encode("utf-8", "surrogatepass"))) == repr(expected)


def test_decode_keeps_integers_beyond_64_bits_exact() -> None:
    got = decode('{"n":123456789012345678901234567890}')
    assert got == {"n": 123456789012345678901234567890}
    assert type(got["n"]) is int


@pytest.mark.parametrize("bad", ["", "{", '{"a":1,}', "[1] x", "\ufeff[1]", "'a'", b"\xff\xfe"])
def test_decode_refuses_what_json_loads_refuses(bad: str | bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        decode(bad)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(_JSON, st.booleans())
def test_decode_of_any_json_is_json_loads(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert repr(decode(text)) == repr(json.loads(text))
