"""The OpenAPI 3.1 document, generated from the tools' pydantic models.

The tools', tasks' and approvals' routes are here; the durable runs' are
:mod:`agentq.server.openapi_runs`'s (their models re-exported here), what every
operation shares :mod:`agentq.server.openapi_responses`'s.

Each agent-callable tool gets its own path ``/v1/tools/<name>/actions`` whose
request body is :func:`action_model` of the tool: ``args`` is the tool's own
argument model, so a client generator (or a schema-driven tester) sees exactly
what the executor validates.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import models_json_schema

from agentq.approvals import ApprovalInfo
from agentq.catalog import RecordedTool
from agentq.ledger import TaskInfo, TaskStatus
from agentq.runtime import Runtime
from agentq.server.openapi_responses import json_response, responses
from agentq.server.openapi_runs import (
    AGENT_NAME,
    RUN_MODELS,
    RunCancel,
    RunList,
    RunMessage,
    RunStart,
    run_paths,
)
from agentq.tools import ToolDef
from agentq.tools.arguments import close_schema, refuses_unknown
from agentq.webhooks import WEBHOOK_TOOL

__all__ = [
    "AGENT_NAME",
    "ApprovalDecision",
    "RejectDecision",
    "RunCancel",
    "RunList",
    "RunMessage",
    "RunStart",
    "TaskList",
    "action_model",
    "action_model_for",
    "callback_pattern",
    "openapi_document",
]


def action_model_for(rt: Runtime, definition: ToolDef) -> type[BaseModel]:
    """:func:`action_model` with this runtime's webhook allow-list."""
    allowed = rt.policy.for_tool(WEBHOOK_TOOL).allowed_hosts
    return action_model(definition, callback_pattern(allowed))


class TaskList(BaseModel):
    """A page of tasks; ``next_after`` is the ``after`` of the next page (``None``
    after the last)."""

    tasks: list[TaskInfo]
    next_after: str | None


class ApprovalList(BaseModel):
    """Approval requests."""

    approvals: list[ApprovalInfo]


class ApprovalDecision(BaseModel):
    """The body of approve / reject (optional). ``args`` (approve only): the
    approver's edit of the call, the whole argument object, checked against the
    tool's schema and the policy as an agent's call would be."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(default="", max_length=2000)
    args: dict[str, Any] | None = None


class RejectDecision(BaseModel):
    """The body of reject (optional): a rejection never edits the call."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(default="", max_length=2000)


class ProblemDetail(BaseModel):
    """RFC 9457 problem details; ``errors`` name the fields or headers at fault."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    errors: list[dict[str, str]] | None = None


def callback_pattern(allowed_hosts: Sequence[str]) -> str | None:
    """The ``callback_url`` values webhooks may be sent to, as a regex: http(s),
    an allowed host, an optional port and path; no userinfo, query or fragment
    (nothing that could carry a credential into the ledger). None: no host allowed."""
    hosts = []
    for pattern in allowed_hosts:
        if pattern.startswith("*."):
            hosts.append(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*" + re.escape(pattern[1:]))
        else:
            hosts.append(re.escape(pattern))
    if not hosts:
        return None
    return rf"^https?://({'|'.join(hosts)})(:[0-9]{{1,5}})?(/[^?#\s]*)?$"


@lru_cache(maxsize=256)
def action_model(definition: ToolDef, callback: str | None) -> type[BaseModel]:
    """The request body of ``POST /v1/tools/<tool>/actions``; ``callback`` is
    :func:`callback_pattern` of the webhook allow-list."""
    base = definition.name.title().replace("_", "")
    if callback is None:
        callback_field: Any = (None, Field(default=None, description="no webhook host is allowed"))
    else:
        callback_field = (
            str | None,
            Field(default=None, max_length=2048, pattern=callback,
                  description="POSTed the signed outcome once the task is final"),
        )  # fmt: skip
    return create_model(
        f"{base}Action",
        __config__=ConfigDict(extra="forbid"),
        __doc__=f"Enqueue {definition.name!r}. {definition.description}".strip(),
        args=(definition.args_model, Field(description="the tool's arguments")),
        callback_url=callback_field,
        ordering_key=(str | None, Field(default=None, min_length=1, max_length=1024)),
        dedupe_key=(str | None, Field(default=None, min_length=1, max_length=255,
                                      description=_DEDUPE_DESCRIPTION)),
        reason=(str, Field(default="", max_length=2000)),
    )  # fmt: skip


_DEDUPE_DESCRIPTION = (
    "the same call with this key while its task is pending returns that task (200, "
    "Agentq-Collapsed: true) instead of a new one"
)


def _task_id_param() -> dict[str, Any]:
    return {"name": "task_id", "in": "path", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": 200}}  # fmt: skip


def _approval_id_param() -> dict[str, Any]:
    return {"name": "approval_id", "in": "path", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": 200}}  # fmt: skip


# A list of entity tags (RFC 9110), visible ASCII; the server also ignores empty elements.
_ENTITY_TAG = r'(W/)?"[!#-~]*"'
_IF_MATCH = rf"^[ \t]*{_ENTITY_TAG}([ \t]*,[ \t]*{_ENTITY_TAG})*[ \t]*$"
_EVENTS_DESCRIPTION = (
    "server-sent events (text/event-stream), one now and one at each change of the "
    "task until it is final, then the stream ends: each is the lines `event: task`, "
    "`id: ` with the time the task changed, and `data: ` with the task as one line of "
    "JSON (a TaskInfo), then an empty line; lines starting with a colon are pings"
)
_SSE_EVENT = {
    "type": "object", "required": ["event", "data"],
    "properties": {
        "event": {"const": "task"}, "id": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json",
                 "contentSchema": {"$ref": "#/components/schemas/TaskInfo"}},
    },
}  # fmt: skip
_LOCATION = {"Location": {"schema": {"type": "string"}, "description": "the task"}}
_ETAG = {"ETag": {"schema": {"type": "string"}, "description": "the approval's version"}}


def _splice_recorded_args(
    body: dict[str, Any], tool: RecordedTool, schemas: dict[str, Any]
) -> None:
    """Make ``args`` of a catalog tool's action body (``body``, a component) the
    tool's recorded JSON Schema, its ``$defs`` joining the components (under the
    tool's name as a prefix where another schema holds the name)."""
    schema = copy.deepcopy(dict(tool.args_schema))
    defs: dict[str, Any] = schema.pop("$defs", {})
    prefix = tool.name.title().replace("_", "")
    names = {n: n if schemas.get(n, d) == d else f"{prefix}{n}" for n, d in defs.items()}

    def rewrite(node: Any) -> Any:
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {k: rewrite(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in names:
            out["$ref"] = f"#/components/schemas/{names[ref[8:]]}"
        return out

    for name, definition in defs.items():
        schemas[names[name]] = rewrite(definition)
    body["properties"]["args"] = rewrite(schema) | {"description": "the tool's arguments"}


def _type_approval_edits(
    rt: Runtime, tools: Sequence[ToolDef], refs: Any, schemas: dict[str, Any]
) -> None:
    """Approve's ``args`` (the approver's edit) as the arguments of a tool whose
    calls can wait for approval (its policy has an approval rule, or the tool
    says so): one of them, or null. Edits are checked against the approval's own
    tool; the document says at least which shapes an edit can have."""
    gated = {rule.tool for rule in rt.policy.approvals} | {
        t.name for t in tools if t.requires_approval
    }
    shapes = []
    for t in tools:
        if t.name in gated:
            body_ref = refs[(action_model_for(rt, t), "validation")]["$ref"]
            body = schemas[body_ref.rsplit("/", 1)[-1]]
            shapes.append({k: v for k, v in body["properties"]["args"].items()
                           if k != "description"})  # fmt: skip
    if gated - {t.name for t in tools}:  # gated tools not exposed here: any object
        shapes.append({"type": "object"})
    args = schemas["ApprovalDecision"]["properties"]["args"]
    args["anyOf"] = [*shapes, {"type": "null"}]
    args["description"] = (
        "the approver's edit: the whole arguments of the approval's tool, checked "
        "against that tool's schema and the policy (422 if they do not fit it)"
    )


def openapi_document(
    rt: Runtime, known: Iterable[ToolDef] | None = None, *, key_required: frozenset[str]
) -> dict[str, Any]:
    """The whole document for the tools ``known`` (default: the runtime's,
    :meth:`~agentq.runtime.Runtime.known_tools`)."""
    known = rt.known_tools() if known is None else known
    tools = [t for t in sorted(known, key=lambda t: t.name)
             if not rt.is_internal(t.name) and not t.internal and t.visible]  # fmt: skip
    models: list[tuple[type[BaseModel], Any]] = [
        (TaskInfo, "serialization"), (TaskList, "serialization"),
        (ApprovalInfo, "serialization"), (ApprovalList, "serialization"),
        (ApprovalDecision, "validation"), (RejectDecision, "validation"),
        (ProblemDetail, "serialization"), *RUN_MODELS,
    ]  # fmt: skip
    models += [(action_model_for(rt, t), "validation") for t in tools]
    refs, top = models_json_schema(models, ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas["Problem"] = schemas.pop("ProblemDetail")
    for t in tools:
        if isinstance(t, RecordedTool):  # from the catalog: its recorded schema, as it is
            body_ref = refs[(action_model_for(rt, t), "validation")]["$ref"]
            _splice_recorded_args(schemas[body_ref.rsplit("/", 1)[-1]], t, schemas)
            continue
        # The server refuses argument names a tool does not take: the spec says so.
        if refuses_unknown(t.args_model):
            body_ref = refs[(action_model_for(rt, t), "validation")]["$ref"]
            close_schema(schemas[body_ref.rsplit("/", 1)[-1]]["properties"]["args"], schemas)
    _type_approval_edits(rt, tools, refs, schemas)
    paths: dict[str, Any] = {}
    for t in tools:
        body_ref = refs[(action_model_for(rt, t), "validation")]["$ref"]
        paths[f"/v1/tools/{t.name}/actions"] = {"post": {
            "operationId": f"enqueue_{t.name}",
            "summary": t.description or f"Enqueue {t.name}",
            "parameters": [{
                "name": "Idempotency-Key", "in": "header", "required": t.name in key_required,
                "description": "the same key with the same body returns the same task",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255,
                           "pattern": "^[!-~]+$"},
            }],
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": {"$ref": body_ref}}}},
            "responses": responses(
                {"200": json_response("TaskInfo", "the task this Idempotency-Key created before",
                                      _LOCATION),
                 "202": json_response("TaskInfo", "accepted: the task is queued or awaits approval",
                                      _LOCATION)},
                400, 409, 413, 415, 422,
            ),
        }}  # fmt: skip
    paths["/v1/tasks"] = {"get": {
        "operationId": "list_tasks",
        "parameters": [
            {"name": "status", "in": "query", "required": False,
             "schema": {"type": "string", "enum": [s.value for s in TaskStatus]}},
            {"name": "tool", "in": "query", "required": False,
             "schema": {"type": "string", "minLength": 1, "maxLength": 64}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
            {"name": "after", "in": "query", "required": False,
             "description": "the next_after of the previous page",
             "schema": {"type": "string", "pattern": "^tsk_[!-~]{1,196}$"}},
            {"name": "order", "in": "query", "required": False,
             "description": "newest first (the default) or oldest first",
             "schema": {"type": "string", "enum": ["newest", "oldest"], "default": "newest"}},
        ],
        "responses": responses({"200": json_response("TaskList", "a page of tasks, newest first "
                                                             "unless order=oldest")}, 400),
    }}  # fmt: skip
    paths["/v1/tasks/{task_id}"] = {"get": {
        "operationId": "get_task",
        "parameters": [_task_id_param(), {
            "name": "Prefer", "in": "header", "required": False,
            "description": "wait=N (RFC 7240): answer when the task is final or N s passed",
            "schema": {"type": "string"},
        }],
        "responses": responses({"200": json_response("TaskInfo", "the task")}, 404, 429),
    }}  # fmt: skip
    paths["/v1/tasks/{task_id}/events"] = {"get": {
        "operationId": "task_events",
        "parameters": [_task_id_param()],
        "responses": responses({"200": {
            "description": _EVENTS_DESCRIPTION,
            # The body is a stream of text, not one JSON value: to a client generator a
            # string, read line by line as it comes (the README shows how); to a tool
            # that parses the stream (schemathesis), its events in order. Each event,
            # as OpenAPI 3.2 writes it, is ``itemSchema``.
            "content": {"text/event-stream": {
                "schema": {"anyOf": [{"type": "string"},
                                     {"type": "array", "items": _SSE_EVENT}]},
                "itemSchema": _SSE_EVENT,
            }},
        }}, 404, 429),
    }}  # fmt: skip
    paths["/v1/tasks/{task_id}:cancel"] = {"post": {
        "operationId": "cancel_task",
        "parameters": [_task_id_param()],
        "responses": responses({"200": json_response("TaskInfo", "the cancelled task")}, 404, 409),
    }}  # fmt: skip
    paths["/v1/approvals"] = {"get": {
        "operationId": "list_approvals",
        "parameters": [{"name": "status", "in": "query", "required": False,
                        "schema": {"type": "string", "enum": [
                            "pending", "escalated", "approved", "rejected", "auto_rejected", "void",
                            "expired"]}}],
        "responses": responses({"200": json_response("ApprovalList", "approval requests")}, 400),
    }}  # fmt: skip
    paths["/v1/approvals/{approval_id}"] = {"get": {
        "operationId": "get_approval",
        "parameters": [_approval_id_param()],
        "responses": responses({"200": json_response("ApprovalInfo", "the approval", _ETAG)}, 404),
    }}  # fmt: skip
    for verb in ("approve", "reject"):
        paths[f"/v1/approvals/{{approval_id}}:{verb}"] = {"post": {
            "operationId": f"{verb}_approval",
            "parameters": [_approval_id_param(), {
                "name": "If-Match", "in": "header", "required": True,
                "description": "the approval's ETag: refused (412) if it changed since, "
                               "or if no entity tag given matches it (428 without it, "
                               "400 if it is not a list of entity tags, or '*')",
                "schema": {"type": "string", "pattern": _IF_MATCH},
            }],
            "requestBody": {"required": False, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/" + (
                    "ApprovalDecision" if verb == "approve" else "RejectDecision")}}}},
            "responses": responses(
                {"200": json_response("TaskInfo", f"{verb}d: the approval's task")},
                400, 404, 409, 412, 413, 415, 422, 428,
            ),
        }}  # fmt: skip
    paths.update(run_paths())
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentq", "version": "1",
                 "description": "Enqueue agents' tool calls as durable, policy-checked tasks."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }  # fmt: skip
