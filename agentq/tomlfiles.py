"""Reading agentq's TOML files (``agentq.toml``, policy files) with errors a user can act on.

Every problem is a :class:`~agentq.errors.ConfigError` whose message names the
file and, for a bad value, the field and the value, e.g.::

    policy file policies/refunds.toml: tools.execute_refund.timeout = 1e+300:
        duration 1e+300 is too long (at most 3650d)

(one line per problem; wrapped here).

The original exception is kept as ``__cause__``.
"""

from __future__ import annotations

import difflib
import tomllib
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from agentq.errors import ConfigError

__all__ = ["MAX_TOML_BYTES", "Locator", "field_name", "read_toml", "validation_problems"]

#: The largest TOML file agentq reads (config, policies, tokens). Far above any
#: real one; without a bound ``--config /dev/zero`` (or a log file named by
#: mistake) was read until memory ran out.
MAX_TOML_BYTES = 1024 * 1024


def read_toml(file: Path, what: str) -> dict[str, Any]:
    """The parsed contents of ``file``; ``what`` names it in errors ("policy file")."""
    try:
        with file.open("rb") as stream:
            data = stream.read(MAX_TOML_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {file}: cannot be read: {exc.strerror or exc}") from exc
    if len(data) > MAX_TOML_BYTES:
        raise ConfigError(
            f"{what} {file}: larger than {MAX_TOML_BYTES} bytes; is it the right file?"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{what} {file}: not UTF-8: byte 0x{data[exc.start]:02x} on line {line} "
            f"(offset {exc.start}); TOML files must be UTF-8"
        ) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {file}: invalid TOML: {exc}") from exc


def _short_repr(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_name(loc: Sequence[int | str]) -> str:
    """A pydantic error location as the TOML path a user writes: ``approvals[0].tool``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


Locator = Callable[[tuple[int | str, ...]], tuple[str, tuple[int | str, ...]]]


def _unwrap(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and ``None`` of an optional: what holds keys."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin is Union or origin is types.UnionType:
            tp = next((a for a in get_args(tp) if a is not type(None)), tp)
            if get_origin(tp) in (Union, types.UnionType):
                return tp
        else:
            return tp


def _keys_at(model: Any, path: Sequence[int | str]) -> list[str]:
    """The keys the model takes at ``path`` (through fields, lists and dicts);
    empty where that is not a model."""
    tp = model
    for part in path:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return []
            tp = field.annotation
        elif get_origin(tp) in (list, tuple, Sequence) and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) in (dict, Mapping):
            tp = get_args(tp)[-1]
        else:
            return []
    tp = _unwrap(tp)
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return []
    return [f.alias or name for name, f in tp.model_fields.items()]


def _unknown_key(key: object, known: Sequence[str]) -> str:
    """The problem of a key the model does not take, with the closest one."""
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    return f"unknown key: did you mean {close[0]!r}?" if close else (
        f"unknown key (known: {', '.join(known)})" if known else "unknown key"
    )


def validation_problems(
    exc: ValidationError, locate: Locator, model: type[BaseModel] | None = None
) -> str:
    """One line per pydantic error: ``<what> <file>: <field> = <value>: <problem>``.

    ``locate(loc)`` gives, for a location in the validated data, the file it came
    from (as ``"policy file <path>"``) and the location within that file: settings
    merged from several files are validated at once. With the validated ``model``,
    a key it does not take is named with the closest one it does ("did you mean").
    """
    lines = []
    for error in exc.errors():
        where, loc = locate(tuple(error["loc"]))
        problem = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden" and model is not None and error["loc"]:
            problem = _unknown_key(error["loc"][-1], _keys_at(model, error["loc"][:-1]))
        if error["type"] == "missing":
            lines.append(f"{where}: {field_name(loc)}: {problem}")
        else:
            value = _short_repr(error.get("input"))
            lines.append(f"{where}: {field_name(loc)} = {value}: {problem}")
    return "\n".join(lines)
