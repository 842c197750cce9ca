"""Tools: named handlers with pydantic argument and result models.

A tool module lives in a tools directory (``tools/`` by default), which the
loader (:mod:`agentq.toolfiles`) imports as a private package, so helpers beside
the tools import relatively (``from ._common import post``); a runtime built after
an edit gets the new code. In a notebook, pass decorated functions instead
(``Runtime(tools=[execute_refund])``)::

    from pydantic import BaseModel
    from agentq import ToolContext, tool

    class RefundArgs(BaseModel):
        order_id: str
        amount: float

    class RefundResult(BaseModel):
        refund_id: str

    @tool(queue="payments", max_attempts=6)
    def execute_refund(ctx: ToolContext, args: RefundArgs) -> RefundResult:
        ...

The argument and result models come from the handler's annotations. The
argument model's JSON schema is what an agent framework shows the model
(:meth:`ToolRegistry.schemas`).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from pydantic import BaseModel, ValidationError

from agentq.errors import ConfigError, InvalidArguments, UnknownTool
from agentq.policies import parse_duration
from agentq.schedules import Periodic, Rule
from agentq.toolfiles import load_tool_modules

__all__ = ["ToolDef", "ToolRegistry", "tool"]

F = TypeVar("F", bound=Callable[..., Any])
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_ATTR = "__agentq_tool__"


@dataclass(frozen=True)
class ToolDef:
    """A tool: its handler, models and per-tool settings."""

    name: str
    handler: Callable[..., Any]
    args_model: type[BaseModel]
    result_model: type[BaseModel] | None
    queue: str = "tasks"
    description: str = ""
    max_attempts: int | None = None
    timeout: float | None = None
    renew_leases: bool = True
    requires_approval: bool = False
    is_async: bool = False
    internal: bool = False
    visible: bool = True
    periodic: Periodic | None = None

    def validate_args(self, args: object) -> BaseModel:
        """Validate untrusted arguments; the error names each bad field."""
        if isinstance(args, self.args_model):
            args = args.model_dump(mode="json")
        if not isinstance(args, Mapping):
            raise InvalidArguments(
                f"tool {self.name!r} takes an object of arguments, got {type(args).__name__}"
            )
        try:
            return self.args_model.model_validate(dict(args))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(args)'}: {err['msg']}"
                for err in exc.errors()
            )
            raise InvalidArguments(f"invalid arguments for tool {self.name!r}: {problems}") from exc

    def enqueueable_args(self, args: object) -> dict[str, Any]:
        """Validate untrusted arguments for a new task: the JSON-compatible dict its
        envelope carries. NaN and infinities are refused, naming the field: JSON
        cannot carry them and no approval rule can compare them."""
        data = self.validate_args(args).model_dump(mode="json")
        bad = _non_finite(data, ())
        if bad is not None:
            where = ".".join(str(p) for p in bad[0]) or "(args)"
            raise InvalidArguments(
                f"invalid arguments for tool {self.name!r}: {where}: {bad[1]!r} is not a "
                "finite number (NaN and infinities are refused: JSON cannot carry them and "
                "no policy can compare them)"
            )
        return data

    def dump_result(self, result: object) -> Any:
        """The handler's result as JSON-compatible data, checked against the result model."""
        if self.result_model is None:
            if isinstance(result, BaseModel):
                return result.model_dump(mode="json")
            return result
        if type(result) is self.result_model:
            return result.model_dump(mode="json")
        model = self.result_model.model_validate(
            result.model_dump() if isinstance(result, BaseModel) else result
        )
        return model.model_dump(mode="json")

    def schema(self) -> dict[str, Any]:
        """OpenAI-style function-calling schema of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.args_model.model_json_schema(),
            },
        }


def tool(
    name: str | None = None,
    *,
    queue: str = "tasks",
    description: str | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    renew_leases: bool = True,
    requires_approval: bool = False,
    internal: bool = False,
    visible: bool = True,
    every: str | float | timedelta | None = None,
    cron: str | None = None,
    timezone: str = "UTC",
    catch_up: int = 0,
) -> Callable[[F], F]:
    """Declare a tool handler ``fn(ctx, args) -> result`` (sync or async).

    ``internal`` tools are sent only by the runtime (never enqueued by an agent,
    never shown to the model); ``visible=False`` keeps an enqueueable tool out of
    :meth:`Runtime.tool_schemas`. ``every="1h"`` or ``cron="0 9 * * MON"`` (in
    ``timezone``) also makes it a periodic schedule named after the tool, whose
    runs get the argument model's defaults; ``catch_up`` is how many runs missed
    during downtime are made up (see :mod:`agentq.schedules`).
    """

    def decorate(fn: F) -> F:
        tool_name = name or fn.__name__
        if not _NAME.match(tool_name):
            raise ConfigError(f"invalid tool name {tool_name!r}")
        hints = get_type_hints(fn)
        params = list(inspect.signature(fn).parameters)
        if len(params) != 2:
            raise ConfigError(f"tool {tool_name!r}: handler must take (ctx, args)")
        args_model = hints.get(params[1])
        if not (isinstance(args_model, type) and issubclass(args_model, BaseModel)):
            raise ConfigError(
                f"tool {tool_name!r}: annotate the args parameter with a pydantic model"
            )
        result_model = hints.get("return")
        if not (isinstance(result_model, type) and issubclass(result_model, BaseModel)):
            result_model = None
        definition = ToolDef(
            name=tool_name,
            handler=fn,
            args_model=args_model,
            result_model=result_model,
            queue=queue,
            description=description or inspect.getdoc(fn) or "",
            max_attempts=max_attempts,
            timeout=timeout,
            renew_leases=renew_leases,
            requires_approval=requires_approval,
            is_async=inspect.iscoroutinefunction(fn),
            internal=internal,
            visible=visible,
            periodic=_periodic(tool_name, args_model, every, cron, timezone, catch_up),
        )
        setattr(fn, _ATTR, definition)
        return fn

    return decorate


class ToolRegistry:
    """The tools a runtime knows, by name."""

    def __init__(self, tools: Iterable[ToolDef] = ()) -> None:
        self._tools: dict[str, ToolDef] = {}
        for t in tools:
            self.add(t)

    def add(self, definition: ToolDef | Callable[..., Any]) -> ToolDef:
        """Register a :class:`ToolDef` or a function decorated with :func:`tool`."""
        if not isinstance(definition, ToolDef):
            found = getattr(definition, _ATTR, None)
            if not isinstance(found, ToolDef):
                raise ConfigError(f"{definition!r} is not decorated with @agentq.tool")
            definition = found
        existing = self._tools.get(definition.name)
        if existing is not None and existing.handler is not definition.handler:
            raise ConfigError(f"tool {definition.name!r} is defined twice")
        self._tools[definition.name] = definition
        return definition

    def load_dir(self, path: str | Path, *, reload: bool = False) -> list[ToolDef]:
        """Import the tools folder ``path`` and register its tools: every ``*.py``
        directly in it whose name does not start with ``_`` (those are helpers).

        The folder's code is imported again when a file in it changed since it
        was last loaded in this process, or when ``reload`` is true (see
        :mod:`agentq.toolfiles`)."""
        found: list[ToolDef] = []
        for module in load_tool_modules(path, reload=reload):
            for value in vars(module).values():
                definition = getattr(value, _ATTR, None)
                if isinstance(definition, ToolDef) and value is definition.handler:
                    found.append(self.add(definition))
        return found

    def get(self, name: str) -> ToolDef:
        """The tool called ``name`` (UnknownTool lists the known ones)."""
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownTool(f"unknown tool {name!r} (known: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def names(self) -> list[str]:
        """Sorted tool names."""
        return sorted(self._tools)

    def queues(self) -> set[str]:
        """Every queue a registered tool uses."""
        return {t.queue for t in self._tools.values()}

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of every tool."""
        return [self._tools[n].schema() for n in self.names()]


def _periodic(
    name: str,
    args_model: type[BaseModel],
    every: str | float | timedelta | None,
    cron: str | None,
    timezone: str,
    catch_up: int,
) -> Periodic | None:
    """The schedule ``@tool(every=..., cron=...)`` declares, if any."""
    if every is None and cron is None:
        return None
    try:
        interval = None if every is None else parse_duration(every)
        periodic = Periodic(Rule(every=interval, cron=cron, timezone=timezone), catch_up)
        args_model.model_validate({})
    except ValidationError as exc:
        raise ConfigError(
            f"tool {name!r}: a periodic tool's runs get no arguments, so every field of "
            f"{args_model.__name__} needs a default (or declare the schedule in a policy "
            "with args)"
        ) from exc
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"tool {name!r}: {exc}") from exc
    return periodic


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
