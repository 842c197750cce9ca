"""jsontext.loads: JSON from outside with bounded nesting (issue 27, item 13)."""

from __future__ import annotations

import pytest

from agentq.jsontext import MAX_DEPTH, loads


def test_nesting_up_to_the_limit_parses_and_beyond_is_a_value_error() -> None:
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(at_limit) == loads(at_limit.encode())
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH}"):
        loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="nested deeper"):
        loads(b'{"a":' * 100_000 + b"1" + b"}" * 100_000)


def test_brackets_inside_strings_and_many_siblings_do_not_count() -> None:
    assert loads('{"s": "' + "[" * 500 + '\\"["}') == {"s": "[" * 500 + '"['}
    wide = "[" + ",".join(["[]"] * 1000) + "]"
    assert len(loads(wide)) == 1000
