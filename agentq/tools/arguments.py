"""An agent's untrusted tool arguments: validated against the tool's model and
encoded as the JSON text a task's ledger record keeps.

Errors name the tool and each bad field (:class:`~agentq.errors.InvalidArguments`).
NaN and infinities are refused: JSON cannot carry them and no approval rule can
compare them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ValidationError

from agentq.errors import InvalidArguments
from agentq.jsontext import compact

__all__ = ["encode_args", "validate_args"]


def validate_args(tool: str, model: type[BaseModel], args: object) -> BaseModel:
    """``args`` validated as ``model`` (an instance of it is re-validated from its
    JSON form); the error names each bad field."""
    if isinstance(args, model):
        args = args.model_dump(mode="json")
    if not isinstance(args, Mapping):
        raise InvalidArguments(
            f"tool {tool!r} takes an object of arguments, got {type(args).__name__}"
        )
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(args)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidArguments(f"invalid arguments for tool {tool!r}: {problems}") from exc


def encode_args(tool: str, validated: BaseModel) -> tuple[dict[str, Any], str]:
    """Validated arguments as JSON-compatible data and their JSON text (encoded
    once, here); a NaN or infinity is refused, naming its field."""
    data = validated.model_dump(mode="json")
    try:
        return data, compact(data)
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
