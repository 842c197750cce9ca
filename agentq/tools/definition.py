"""A tool's definition (:class:`ToolDef`): its handler, argument and result
models and per-tool settings, and how a definition is attached to the function
:func:`agentq.tool` decorated, where :class:`~agentq.tools.ToolRegistry` finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from agentq.schedules import Periodic
from agentq.tools.arguments import close_schema, encode_args, refuses_unknown, validate_args

__all__ = ["DEFAULT_MAX_BATCH", "MAX_BATCH_LIMIT", "ToolDef", "attach", "attached"]

#: A batch handler's default and largest batch (the documents' max_batch_size=>50).
DEFAULT_MAX_BATCH = 50
MAX_BATCH_LIMIT = 10_000
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
    #: A batch handler: ``fn(ctx: BatchContext, items: list[Args]) -> list[...]``.
    batch: bool = False
    max_batch: int = DEFAULT_MAX_BATCH
    #: New tasks' delivery rounded up to this window (:mod:`agentq.batching`).
    batch_window: timedelta | None = None
    batch_offset_field: str | None = None
    periodic: Periodic | None = None
    idempotent: bool = True
    reconcile: Callable[..., Any] | None = None
    at_most_once: bool = False
    #: A local tool's handler is ``fn(tx, args)``: it runs inside a transaction
    #: (a durable run's turn, or the approval of its call), not in a worker.
    local: bool = False
    #: The ``ctx.settings`` keys the handler needs: ``agentq worker`` and
    #: ``agentq enqueue`` warn when one is unset (its tasks would fail).
    settings: tuple[str, ...] = ()

    @property
    def guarded(self) -> bool:
        """Whether a started call of this tool is recorded durably before its
        handler runs, so a redelivery after a crash is reconciled or parked
        instead of calling the external API again (:mod:`agentq.executor.guarded`)."""
        return self.at_most_once or not self.idempotent or self.reconcile is not None

    def validate_args(self, args: object) -> BaseModel:
        """Validate arguments (a queued task's); the error names each bad field."""
        return validate_args(self.name, self.args_model, args)

    def validate_new_args(self, args: object) -> BaseModel:
        """Validate untrusted arguments for a new task: as :meth:`validate_args`,
        and an argument name the tool does not take is refused unless its model
        opts in (:func:`~agentq.tools.arguments.refuses_unknown`)."""
        return validate_args(self.name, self.args_model, args, refuse_unknown=True)

    def enqueueable_args(self, args: object) -> dict[str, Any]:
        """Validate untrusted arguments for a new task: the JSON-compatible dict its
        ledger record keeps. NaN and infinities are refused, naming the field: JSON
        cannot carry them and no approval rule can compare them."""
        return self.encoded_args(args)[0]

    def encoded_args(self, args: object) -> tuple[dict[str, Any], str]:
        """:meth:`enqueueable_args`, and their stored JSON text (encoded once, here)."""
        # Through validate_new_args: a recorded tool (agentq.catalog) validates its own way.
        return encode_args(self.name, self.validate_new_args(args))

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
                "parameters": self.args_json_schema(),
            },
        }

    def args_json_schema(self) -> dict[str, Any]:
        """The arguments' JSON Schema, as advertised and recorded in the catalog:
        ``additionalProperties: false`` unless the tool takes extra keys."""
        schema = self.args_model.model_json_schema()
        if refuses_unknown(self.args_model):
            close_schema(schema)
        return schema


def attach(fn: Callable[..., Any], definition: ToolDef) -> None:
    """Mark ``fn`` as the handler ``definition`` describes."""
    setattr(fn, _ATTR, definition)


def attached(value: object) -> ToolDef | None:
    """The definition :func:`attach` put on ``value``, if any."""
    found = getattr(value, _ATTR, None)
    return found if isinstance(found, ToolDef) else None
