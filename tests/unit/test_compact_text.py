""":func:`agentq.jsontext.compact_text`: orjson's speed where it writes exactly
what the standard library's encoder (``compact``) writes, and the standard
library's text or exception everywhere else; and an enqueue of plain arguments
encodes its arguments and envelope without the standard library's encoder."""

from __future__ import annotations

import dataclasses
import enum
import json.encoder
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentq import Runtime
from agentq.jsontext import compact, compact_text


class Text(str):
    pass


class Number(int):
    def __repr__(self) -> str:
        return "Number()"


class Level(enum.IntEnum):
    HIGH = 3


class Colour(enum.Enum):
    RED = "red"


class Shuffled(dict[str, Any]):
    def items(self) -> Any:  # what the stdlib's encoder iterates
        return reversed(list(super().items()))


@dataclasses.dataclass
class Point:
    x: int


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": [value]}
    return value


ASCII = "".join(map(chr, range(128)))

SAME_TEXT = [
    {"n": 1, "pad": ""},
    {"a": [1, True, False, None, "x", (1, 2), [], {}]},
    ASCII,  # every control character's escape, quote, backslash and DEL
    {ASCII: ASCII},
    "é ü 中文 \U0001f600",  # escaped by the stdlib, raw in orjson
    "\ud800",  # a lone surrogate: orjson refuses it
    2**63,
    2**64 - 1,
    2**64,  # beyond 64 bits: orjson refuses it
    -(2**63) - 1,
    10**30,
    [1e-05, 1e16, 0.1, -0.0, 1.0, 123456789.123],  # orjson writes 1e-05 as 0.00001
    Text("sub"),
    {Text("key"): Text("value")},
    Number(7),
    Level.HIGH,
    OrderedDict([("b", 1), ("a", 2)]),
    Shuffled(a=1, b=2),
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
    _nested(10),
    _nested(40),  # deeper than the fast path looks
]


@pytest.mark.parametrize("value", SAME_TEXT, ids=range(len(SAME_TEXT)))
def test_the_text_is_compacts(value: Any) -> None:
    assert compact_text(value) == compact(value)


def _circular() -> Any:
    loop: list[Any] = []
    loop.append(loop)
    return loop


REFUSED = [
    float("nan"),  # orjson writes null
    {"amount": float("inf")},
    [float("-inf")],
    Colour.RED,  # orjson writes "red"
    uuid.UUID(int=1),  # orjson writes it as a string
    datetime(2026, 1, 1, tzinfo=UTC),
    Point(1),
    {1, 2},
    _circular(),
]


@pytest.mark.parametrize("value", REFUSED, ids=range(len(REFUSED)))
def test_what_compact_refuses_is_refused_alike(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        compact(value)
    with pytest.raises(type(expected.value), match=None) as got:
        compact_text(value)
    assert str(got.value) == str(expected.value)


_TOOL = """
from pydantic import BaseModel
from agentq import ToolContext, tool

class Args(BaseModel):
    n: int = 0
    pad: str = ""

@tool(queue="work")
def noop(ctx: ToolContext, args: Args) -> None:
    return None
"""


def test_an_enqueue_of_plain_arguments_runs_no_stdlib_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "noop.py").write_text(_TOOL)
    rt = Runtime(f"sqlite:///{tmp_path / 'q.db'}?durability=normal", tools=str(tools))
    try:
        rt.transact(lambda tx: tx.enqueue("noop", {"n": 1}))  # warm: schemas built
        calls: list[object] = []
        real = json.encoder.c_make_encoder  # type: ignore[attr-defined]

        def counted(*args: Any) -> Any:
            calls.append(args)
            return real(*args)

        monkeypatch.setattr(json.encoder, "c_make_encoder", counted)
        task = rt.transact(lambda tx: tx.enqueue("noop", {"n": 2, "pad": "x"}))
        assert calls == []
        assert task.args == {"n": 2, "pad": "x"}
        assert rt.task(task.task_id).args == {"n": 2, "pad": "x"}
    finally:
        rt.close()
