"""How every backend stores a record: compact JSON text (:func:`encode_record`,
:func:`encode_fields`), encoded before a transaction, off the write lock, and
what the encoder knew of the record's status, owner and tool (:class:`EncodedRecord`),
so that no write parses its own text again."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["EncodedFields", "EncodedRecord", "encode_fields", "encode_record", "record_text"]


#: :attr:`EncodedRecord.status` of a text whose status its maker did not say.
_UNSAID: Any = object()


class EncodedRecord(str):
    """A record already encoded by :func:`encode_record`: a transaction stores it
    as it is, so the encoding can happen before the transaction, off the write
    lock that every other writer waits for.

    ``status`` is the record's top-level ``"status"`` as its text holds it (a
    string, or None for none or one of no other JSON type) when the encoder knew
    it: :func:`record_rare_status` then reads it there instead of parsing the
    whole record again (every enqueue, every whole-record claim or completion).
    Text made another way (``EncodedRecord(text)``) does not say, and is parsed.
    """

    status: Any = _UNSAID
    #: The record's ``"created_by"``, told as ``status`` is (:mod:`agentq.backends.owners`).
    owner: Any = _UNSAID
    #: The record's ``"tool"``, told likewise (:mod:`agentq.backends.tool_column`).
    tool: Any = _UNSAID

    def extended(self, members: str) -> EncodedRecord:
        """This record's text with ``members`` (``,"name":value`` pairs, not
        ``status``) added at its end; it says the same status."""
        out = EncodedRecord(f"{self[:-1]}{members}}}")
        out.status, out.owner, out.tool = self.status, self.owner, self.tool
        return out


def _loads(text: str) -> Any:
    """``text`` parsed for its status (a string either parser reads alike; None:
    not JSON). orjson takes only an exact ``str``: an :class:`EncodedRecord`
    (a subclass) is handed over as one, or it would always fall back."""
    try:
        return orjson.loads(text if type(text) is str else str(text))
    except orjson.JSONDecodeError:
        try:
            return json.loads(text)
        except ValueError:
            return None


def encode_record(value: Mapping[str, Any]) -> EncodedRecord:
    """Encode a record the way every backend stores it (compact JSON, UTF-8 text).

    orjson, because every write of the ledger encodes a record; what it cannot
    encode (an integer beyond 64 bits) falls back to the standard library. Both
    write values JSON has no type for with ``str``; orjson writes a NaN or an
    infinity (which JSON cannot carry) as null.
    """
    try:
        out = EncodedRecord(
            orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        )
    except TypeError:  # orjson.JSONEncodeError is one
        text = json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False)
        out = EncodedRecord(text)
    out.status = _encoded_status(value.get("status"))
    out.owner = _encoded_status(value.get("created_by"))
    out.tool = _encoded_status(value.get("tool"))
    return out


# Python types whose JSON is never a string (or is null): such a status is None
# to the index, as its text read back would be.
_NOT_TEXT = (int, float, list, tuple, dict, type(None))


def _encoded_status(status: Any) -> Any:
    """What the text of ``status`` reads back as, for :func:`rare_status`: a
    string as the plain string written (a ``StrEnum`` member's value), None for
    null or a value of any other JSON type, :data:`_UNSAID` where only the text
    can tell (a value written with ``str()``, an ``Enum`` orjson writes by its value)."""
    if isinstance(status, str):
        return str.__str__(status)
    if isinstance(status, _NOT_TEXT):
        return None
    return _UNSAID


def record_text(value: Mapping[str, Any] | EncodedRecord) -> str:
    """The stored text of a record value, encoding it unless it already is."""
    return value if isinstance(value, EncodedRecord) else encode_record(value)


@dataclass(frozen=True)
class EncodedFields:
    """Top-level fields of a record with their values already encoded (by
    :func:`encode_fields`, off the write lock), for :meth:`Transaction.update_records`."""

    names: tuple[str, ...]
    values: tuple[str, ...]


# What orjson cannot encode (an integer beyond 64 bits, a string with an unpaired
# surrogate) is encoded as the standard library would, as encode_record does;
# json.dumps with options builds a new encoder per call: one, built once.
_FIELD_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False)


_encode_str = json.encoder.encode_basestring_ascii  # what the encoder does with a str


def _encode_value(value: Any) -> str:
    # Most fields are timestamps, statuses, counts and None: encoded without an encoder.
    kind = type(value)
    if value is None:
        return "null"
    if isinstance(value, str):  # a status is a StrEnum: its value, as both encoders write it
        return str(_encode_str(value))
    if kind is int:
        return int.__repr__(value)  # what either encoder writes, of any size
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError is one
        return _FIELD_ENCODER.encode(value)
    if b"null" in text:
        # orjson writes NaN and infinities as null, which encode_fields refuses:
        # the standard library's encoder raises ValueError for them.
        _FIELD_ENCODER.encode(value)
    return text.decode()


def encode_fields(fields: Mapping[str, Any]) -> EncodedFields:
    """Encode the values of ``fields`` as :func:`encode_record` would inside a
    record (orjson, with its fallback), to the same values once decoded; a
    non-finite number raises ValueError (no JSON has it)."""
    return EncodedFields(tuple(fields), tuple(map(_encode_value, fields.values())))
