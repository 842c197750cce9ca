"""The JSON encoders agentq stores text with, built once.

``json.dumps`` with any option (``separators=``, ``sort_keys=``, ...) builds a
new ``JSONEncoder`` on every call: for a small argument dict about a third of
the call (4-5 µs with it, 3 µs without), two or three times per enqueue. These
module-level encoders produce exactly what the equivalent ``json.dumps`` call
would, and hold no state between calls (safe from any thread).

:func:`decode` reads stored JSON (ledger records, task envelopes) with orjson,
three to five times faster than ``json.loads``, and always to the value
``json.loads`` gives: see its docstring for where orjson would differ.
:func:`compact_text` is :data:`compact` with orjson where that writes the very
same text (an enqueue's arguments and envelope: 4-5 µs of stdlib encoding).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "canonical", "compact", "compact_text", "decode", "loads"]

#: Compact ASCII JSON (no spaces); NaN and infinities raise ``ValueError``.
#: Equal to ``json.dumps(obj, separators=(",", ":"), allow_nan=False)``.
compact: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

# The types whose JSON orjson writes exactly as ``compact`` does, given ASCII text
# without DEL: exact types only (a subclass may encode otherwise in one of them).
# Not float (orjson writes 1e-05 as 0.00001, NaN as null where ``compact``
# raises), nor what only orjson encodes (Enum, UUID, datetime, dataclasses).
_SCALARS = frozenset({str, int, bool, type(None)})
_PLAIN_DEPTH = 16  # deeper values take the stdlib's path (no Python recursion limit here)


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` holds only the types orjson writes as ``compact`` does."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if depth >= _PLAIN_DEPTH:
        return False
    # A loop, not all() over a generator, for a dict: every enqueue encodes two.
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or (type(v) not in _SCALARS and not _plain(v, depth + 1)):
                return False
        return True
    if kind is list or kind is tuple:
        return all(type(v) in _SCALARS or _plain(v, depth + 1) for v in value)
    return False


def compact_text(value: Any) -> str:
    """``compact(value)``: the same text, or the same exception, always.

    orjson where the value holds only exact ``dict``, ``list``, ``tuple``,
    ``str``, ``int``, ``bool`` and ``None`` (no float: orjson formats some
    otherwise, and writes NaN as null where the stdlib refuses it) and orjson's
    text is ASCII without DEL (the stdlib escapes every other character, and
    DEL); the stdlib's encoder for everything else: non-string keys, integers
    beyond 64 bits (orjson refuses them), subclasses, Enum, UUID, datetime
    (orjson would write them, the stdlib refuses them), floats, deep nesting.
    """
    if _plain(value):
        try:
            raw = orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits
            return compact(value)
        if raw.isascii() and b"\x7f" not in raw:
            return raw.decode("ascii")
    return compact(value)


#: Compact ASCII JSON with sorted keys: the same value always gives the same text.
#: Equal to ``json.dumps(obj, sort_keys=True, separators=(",", ":"))``.
canonical: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


#: The deepest nesting :func:`loads` accepts. Far beyond any tool's arguments;
#: well below the interpreter's recursion limit, which a deeper document would
#: hit in ``json.loads`` (a ``RecursionError``: a 500 on the API, a traceback on
#: the CLI) or later, in whatever walks the value.
MAX_DEPTH = 100

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def loads(text: str | bytes) -> Any:
    """``json.loads`` of text from outside (a request body, a command line), with
    nesting bounded by :data:`MAX_DEPTH`.

    Raises ``ValueError`` for text that is not JSON or nests deeper (a
    ``json.JSONDecodeError`` for the former), ``UnicodeDecodeError`` for bytes that
    are not UTF-8/16/32.
    """
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    # Fewer opening brackets than the limit cannot nest deeper: the usual case
    # costs two C-speed counts; only bracket-heavy text is scanned.
    if text.count("[") + text.count("{") > MAX_DEPTH:
        depth = 0
        for bracket in _BRACKET.finditer(_STRING.sub("", text)):
            depth += 1 if bracket.group() in "[{" else -1
            if depth > MAX_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text)
    except RecursionError:  # unreachable after the scan; kept so it stays a ValueError
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels") from None


# Every byte that is an ASCII digit becomes "0", every other byte " ": a run of
# 19 digits anywhere in the text is then one C-speed substring search.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_DIGIT_RUN = b"0" * 19


def decode(text: str | bytes) -> Any:
    """``json.loads(text)``, with orjson wherever that gives the very same value.

    orjson refuses what ``json.loads`` accepts in only a few places (``NaN`` and
    ``Infinity``, a number too large for a float, an unpaired surrogate escape,
    text that is not UTF-8, nesting beyond 1,024): those are read again with
    ``json.loads``, so they give what they always gave. The one place it accepts
    the text but gives another value is an integer beyond 64 bits, which it
    reads as a float: text with 19 or more digits in a row (which may be one)
    is read with ``json.loads`` as well. Invalid JSON raises ``ValueError`` (a
    ``json.JSONDecodeError``), as ``json.loads`` does.
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if _LONG_DIGIT_RUN not in raw.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)
