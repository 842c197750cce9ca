"""The tool catalog: what a producer needs to enqueue, recorded in the database.

A runtime that loads tools (``agentq init``, every worker at start, any
``Runtime(..., tools=...)``) records, per tool, its queue, description, flags
and the JSON Schema of its argument model; one that loads policies records
the policy in force. A producer that opens the database without tools,
``Runtime(db)``, enqueues by tool name against these records: arguments are
validated with the recorded JSON Schema (``jsonschema``, the reference
validator of the standard pydantic emits), top-level defaults are filled in as
the tool's own model would, and the recorded policy's approval rules apply at
enqueue. No handler code is imported. The worker validates the arguments again
with the tool's pydantic model before running it.

The catalog holds what was recorded last: during a rolling deploy, run
``agentq init`` with the new release's tools and policies (or start one of its
workers) before producers send the new tools' calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentq.backends import Backend, Transaction
from agentq.errors import ConfigError, InvalidArguments
from agentq.policies import Policy
from agentq.tools import ToolDef, ToolRegistry
from agentq.tools.arguments import unknown_argument

__all__ = [
    "POLICY_TABLE",
    "TOOL_TABLE",
    "RecordedTool",
    "read_policy",
    "read_tool",
    "read_tools",
    "record",
]

#: Record table of the tool entries, keyed by tool name.
TOOL_TABLE = "tool_catalog"
#: Record table of the recorded policy (one record, :data:`_POLICY_KEY`).
POLICY_TABLE = "recorded_policy"
_POLICY_KEY = "policy"
#: Bumped when an entry's shape changes incompatibly.
_FORMAT = 1


class _RecordedArgs(BaseModel):
    """Stands in for a recorded tool's argument model: it is never used to
    validate (the recorded JSON Schema is), only to satisfy :class:`ToolDef`."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(extra="allow", defer_build=True)


def _cannot_run(*_: Any) -> Any:
    raise RuntimeError("a tool read from the catalog has no handler here; a worker runs it")


@dataclass(frozen=True)
class RecordedTool(ToolDef):
    """A tool known from the catalog: enqueueable and describable, never run."""

    args_schema: Mapping[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        # The generated hash would hash the schema, a dict; the canonical JSON of
        # it stands in (surfaces cache per tool, agentq.server.openapi).
        return hash((self.name, self.queue, json.dumps(self.args_schema, sort_keys=True)))

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> RecordedTool:
        """The tool an entry written by :func:`record` describes."""
        schema = entry.get("args_schema")
        if entry.get("format") != _FORMAT or not isinstance(schema, dict):
            raise ConfigError(
                f"the tool catalog's entry for {entry.get('tool')!r} is not one this agentq "
                "reads: run `agentq init` with the tools to record it again"
            )
        return cls(
            name=str(entry["tool"]), handler=_cannot_run, args_model=_RecordedArgs,
            result_model=None, queue=str(entry["queue"]),
            description=str(entry.get("description", "")),
            requires_approval=bool(entry.get("requires_approval")),
            internal=bool(entry.get("internal")), visible=bool(entry.get("visible", True)),
            batch_window=_seconds(entry.get("batch_window")),
            batch_offset_field=entry.get("batch_offset_field"), args_schema=schema,
        )  # fmt: skip

    def validate_args(self, args: object) -> BaseModel:
        """Validated arguments, as a model (see :meth:`enqueueable_args`)."""
        return _RecordedArgs.model_validate(self.enqueueable_args(args))

    validate_new_args = validate_args

    def enqueueable_args(self, args: object) -> dict[str, Any]:
        """Validate untrusted arguments against the recorded JSON Schema and fill
        in the defaults of missing top-level fields; the error names each bad field."""
        if isinstance(args, BaseModel):
            args = args.model_dump(mode="json")
        if not isinstance(args, Mapping):
            raise InvalidArguments(
                f"tool {self.name!r} takes an object of arguments, got {type(args).__name__}"
            )
        data = dict(args)
        # Imported here: it is a tenth of a second of every CLI start, and only
        # producers validating from a catalog need it.
        import jsonschema

        validator = jsonschema.Draft202012Validator(self.args_schema)
        errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
        if errors:
            problems = [p for e in errors for p in _problems(e)]
            text = "; ".join(f"{'.'.join(str(p) for p in loc) or '(args)'}: {d}"
                             for loc, d in problems)  # fmt: skip
            raise InvalidArguments(
                f"invalid arguments for tool {self.name!r}: {text}", problems=problems
            )
        # As the tool's own model would give them, so that both kinds of producer
        # send the same arguments (idempotency keys compare them).
        for name, prop in self.args_schema.get("properties", {}).items():
            if not isinstance(prop, dict):
                continue
            if name not in data and "default" in prop:
                data[name] = prop["default"]
            value = data.get(name)
            if prop.get("type") == "number" and type(value) is int:
                data[name] = float(value)
        return data

    def args_json_schema(self) -> dict[str, Any]:
        """The recorded arguments' JSON Schema."""
        return dict(self.args_schema)

    def schema(self) -> dict[str, Any]:
        """OpenAI-style function-calling schema, from the recorded JSON Schema."""
        described = super().schema()
        described["function"]["parameters"] = dict(self.args_schema)
        return described


def _problems(error: Any) -> list[tuple[tuple[int | str, ...], str]]:
    """A JSON Schema error as (path, detail) pairs: one per unknown argument name,
    said as the tool's own model says it (:func:`unknown_argument`)."""
    path = tuple(error.absolute_path)
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return [(path, str(error.message))]
    known = list(error.schema.get("properties", {}))
    return [((*path, name), unknown_argument(str(name), known))
            for name in error.instance if name not in known]  # fmt: skip


def _entry(definition: ToolDef) -> dict[str, Any]:
    w = definition.batch_window
    return {
        "format": _FORMAT,
        "tool": definition.name,
        "queue": definition.queue,
        "description": definition.description,
        "requires_approval": definition.requires_approval,
        "internal": definition.internal,
        "visible": definition.visible,
        "args_schema": definition.args_json_schema(),
        # Producers round delivery times to the tool's window (agentq.batching).
        "batch_window": None if w is None else w.total_seconds(),
        "batch_offset_field": definition.batch_offset_field,
    }


def _seconds(value: Any) -> timedelta | None:
    return timedelta(seconds=value) if isinstance(value, int | float) and value > 0 else None


def _policy_data(policy: Policy) -> dict[str, Any]:
    """The policy as JSON that :class:`Policy` reads back: durations in seconds."""

    def plain(value: Any) -> Any:
        if isinstance(value, timedelta):
            return value.total_seconds()
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    data: dict[str, Any] = plain(policy.model_dump(mode="python"))
    for newer in _NEWER_SECTIONS:
        if not data.get(newer):
            # Unset, left out: a process of the release before (a rolling
            # deploy) reads the record its successor wrote, and refuses keys it
            # does not know.
            data.pop(newer, None)
    return {"format": _FORMAT, "policy": data}


#: Policy sections newer than the catalog's format (durable runs' budgets).
_NEWER_SECTIONS = ("agents", "prices", "owners")


def record(backend: Backend, tools: ToolRegistry, policy: Policy | None) -> None:
    """Record every tool's entry (and the policy, if given) in one transaction,
    writing only what changed (nothing, and no transaction, if nothing did)."""
    entries = {t.name: _entry(t) for t in tools}
    policy_record = None if policy is None else _policy_data(policy)
    # JSON round trip: what is compared is what a read gives back.
    entries = json.loads(json.dumps(entries))
    policy_record = json.loads(json.dumps(policy_record))

    recorded = dict(backend.list_records(TOOL_TABLE))
    if all(recorded.get(name) == entry for name, entry in entries.items()) and (
        policy_record is None or backend.get_record(POLICY_TABLE, _POLICY_KEY) == policy_record
    ):
        return  # as recorded: no write (and no write lock) when a runtime opens

    def write(tx: Transaction) -> None:
        for name, entry in entries.items():
            if tx.get_record(TOOL_TABLE, name) != entry:
                tx.put_record(TOOL_TABLE, name, entry)
        if policy_record is not None and tx.get_record(POLICY_TABLE, _POLICY_KEY) != policy_record:
            tx.put_record(POLICY_TABLE, _POLICY_KEY, policy_record)

    # Fenced: each put is the newest entry, whoever wrote before (last writer
    # wins, as a re-run would); no serializable checks, so a worker that starts
    # does not abort the application's transactions beside it.
    backend.transact(write, fenced=True)


def read_tool(tx: Transaction, name: str) -> RecordedTool | None:
    """The recorded tool called ``name``, read in the caller's transaction."""
    entry = tx.get_record(TOOL_TABLE, name)
    return None if entry is None else RecordedTool.from_entry(entry)


def read_tools(backend: Backend) -> ToolRegistry:
    """Every recorded tool."""
    return ToolRegistry(RecordedTool.from_entry(v) for _, v in backend.list_records(TOOL_TABLE))


def read_policy(backend: Backend) -> Policy | None:
    """The recorded policy, if a runtime with policies recorded one."""
    rec = backend.get_record(POLICY_TABLE, _POLICY_KEY)
    if rec is None:
        return None
    if rec.get("format") != _FORMAT:
        raise ConfigError(
            "the recorded policy is not one this agentq reads: run `agentq init` with the "
            "policies to record it again"
        )
    return Policy.model_validate(rec["policy"])
