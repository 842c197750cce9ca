"""An agent's untrusted tool arguments: validated against the tool's model and
encoded as the JSON text a task's ledger record keeps.

Errors name the tool and each bad field (:class:`~agentq.errors.InvalidArguments`).
NaN and infinities are refused: JSON cannot carry them and no approval rule can
compare them.

An argument name the model does not declare is refused for a new task (a model's
typo, ``curency``, would otherwise be dropped and the call run with the default),
naming the fields the tool takes and the closest one. A tool opts in to extra keys
by setting its argument model's ``extra`` explicitly: ``ConfigDict(extra="allow")``
keeps them, ``extra="ignore"`` drops them. Arguments read back from a queued task
are not checked so: a deploy that removed a field must not fail tasks queued before.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ValidationError

from agentq.errors import InvalidArguments
from agentq.jsontext import compact_text

__all__ = [
    "close_schema",
    "encode_args",
    "refuses_unknown",
    "unknown_argument",
    "validate_args",
]


def refuses_unknown(model: type[BaseModel]) -> bool:
    """Whether a new task's arguments may not carry names ``model`` lacks: unless
    the model sets ``extra`` itself (``"allow"``, ``"ignore"``; ``"forbid"``
    refuses them through pydantic)."""
    return model.model_config.get("extra") is None


def close_schema(schema: dict[str, Any], defs: Mapping[str, Any] | None = None) -> None:
    """Mark every object of a refusing tool's argument schema (in place) as taking
    no other properties, nested models' too (found through ``$ref`` in ``defs``,
    the schema's own ``$defs`` by default): the check refuses them all alike."""
    defs = schema.get("$defs", {}) if defs is None else defs
    seen: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("properties"), dict):
            node["additionalProperties"] = False
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.rsplit("/", 1)[-1] not in seen:
            name = ref.rsplit("/", 1)[-1]
            seen.add(name)
            visit(defs.get(name))
        for key, value in node.items():
            if key != "$defs":
                visit(value)

    visit(schema)


def unknown_argument(name: str, known: Sequence[str]) -> str:
    """The message for an argument ``name`` that is none of ``known``."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    takes = ", ".join(known) or "none"
    return f"unknown argument {name!r}{hint}; the tool takes: {takes}"


def validate_args(
    tool: str, model: type[BaseModel], args: object, *, refuse_unknown: bool = False
) -> BaseModel:
    """``args`` validated as ``model`` (an instance of it is re-validated from its
    JSON form); the error names each bad field. ``refuse_unknown`` (a new task's
    arguments) refuses names the model lacks unless it opts in
    (:func:`refuses_unknown`)."""
    if isinstance(args, model):
        args = args.model_dump(mode="json")
    if not isinstance(args, Mapping):
        raise InvalidArguments(
            f"tool {tool!r} takes an object of arguments, got {type(args).__name__}"
        )
    strict = refuse_unknown and refuses_unknown(model)
    try:
        # extra="forbid" for this call reaches nested models too.
        return model.model_validate(dict(args), extra="forbid" if strict else None)
    except ValidationError as exc:
        problems = [(err["loc"], _detail(model, err)) for err in exc.errors()]
        text = "; ".join(f"{_dotted(loc)}: {detail}" for loc, detail in problems)
        raise InvalidArguments(
            f"invalid arguments for tool {tool!r}: {text}", problems=problems
        ) from exc


def _dotted(loc: Sequence[int | str]) -> str:
    return ".".join(str(p) for p in loc) or "(args)"


def _detail(model: type[BaseModel], err: Mapping[str, Any]) -> str:
    loc = tuple(err["loc"])
    if err["type"] != "extra_forbidden" or not loc:
        return str(err["msg"])
    return unknown_argument(str(loc[-1]), _fields_at(model, loc[:-1]))


def _fields_at(model: type[BaseModel], path: tuple[int | str, ...]) -> list[str]:
    """The field names of the (nested) model at ``path``, as far as it can be told."""
    current: Any = model
    for step in path:
        if isinstance(step, int):
            continue  # an item of a list: the list's item model is looked up below
        field = current.model_fields.get(step) if _is_model(current) else None
        if field is None:
            return []
        current = _model_in(field.annotation)
    if not _is_model(current):
        return []
    return [f.alias or name for name, f in current.model_fields.items()]


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _model_in(annotation: Any) -> Any:
    """The model an annotation holds (``Item``, ``list[Item]``, ``Item | None``)."""
    if _is_model(annotation):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def encode_args(tool: str, validated: BaseModel) -> tuple[dict[str, Any], str]:
    """Validated arguments as JSON-compatible data and their JSON text (encoded
    once, here); a NaN or infinity is refused, naming its field."""
    data = validated.model_dump(mode="json")
    try:
        return data, compact_text(data)
    except ValueError:
        pass  # a NaN or infinity: name it below
    bad = _non_finite(data, ())
    if bad is not None:
        where = ".".join(str(p) for p in bad[0]) or "(args)"
        raise InvalidArguments(
            f"invalid arguments for tool {tool!r}: {where}: {bad[1]!r} is not a "
            "finite number (NaN and infinities are refused: JSON cannot carry them and "
            "no policy can compare them)"
        )
    raise InvalidArguments(f"invalid arguments for tool {tool!r}: not encodable as JSON")


def _non_finite(value: Any, path: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any] | None:
    """The path and value of the first NaN or infinite number in ``value``, if any."""
    if isinstance(value, float | Decimal):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple | set | frozenset):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite(item, (*path, key))
        if found is not None:
            return found
    return None
