"""The durable agent runs' part of the OpenAPI document: the models of their
requests' bodies and their routes (:mod:`agentq.server.runs` serves them).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentq.lifecycle.runs import MAX_INPUT_CHARS
from agentq.run_info import RunInfo, RunStatus
from agentq.server.openapi_responses import json_body, json_response, responses

__all__ = [
    "AGENT_NAME", "RUN_MODELS", "RunCancel", "RunList", "RunMessage", "RunStart", "run_paths",
]  # fmt: skip

#: An agent's name, as :class:`agentq.agents.Agent` takes it.
AGENT_NAME = r"^[A-Za-z][A-Za-z0-9_]{0,62}$"
#: Text a run takes (its input, a message): something besides whitespace.
_NOT_BLANK = r"\S"


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank: the user's message, some text")
    return value


class RunList(BaseModel):
    """A page of runs, newest first; ``next_after`` is the ``after`` of the next
    page (``None`` after the last)."""

    runs: list[RunInfo]
    next_after: str | None


class RunStart(BaseModel):
    """The body of ``POST /v1/runs``: which agent, and the user's first message."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(pattern=AGENT_NAME, description="the agent's name")
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS,
                       json_schema_extra={"pattern": _NOT_BLANK},
                       description="the user's message: the run's first")  # fmt: skip

    _input_not_blank = field_validator("input")(_not_blank)


class RunMessage(BaseModel):
    """The body of ``POST /v1/runs/{run_id}/messages``: the user's next message."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_INPUT_CHARS,
                      json_schema_extra={"pattern": _NOT_BLANK},
                      description="the user's next message")  # fmt: skip

    _text_not_blank = field_validator("text")(_not_blank)


class RunCancel(BaseModel):
    """The body of ``POST /v1/runs/{run_id}:cancel`` (optional): why."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=2000,
                        description="recorded as the run's error, with who cancelled "
                                    "it")  # fmt: skip


def _run_id_param() -> dict[str, Any]:
    return {"name": "run_id", "in": "path", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": 200}}  # fmt: skip


def _until_param() -> dict[str, Any]:
    return {"name": "until", "in": "query", "required": False,
            "description": "idle (the default): the run is done or awaits a human's "
                           "approval; done: it succeeded, failed or was cancelled",
            "schema": {"type": "string", "enum": ["idle", "done"], "default": "idle"}}  # fmt: skip


_RUN_EVENTS_DESCRIPTION = (
    "server-sent events (text/event-stream), one now and one at each change of the "
    "run until it is idle (done, or awaiting a human's approval; until=done: done), "
    "then the stream ends: each is the lines `event: run`, `id: ` with the time the "
    "run changed, and `data: ` with the run as one line of JSON (a RunInfo), then an "
    "empty line; lines starting with a colon are pings"
)
_RUN_SSE_EVENT = {
    "type": "object", "required": ["event", "data"],
    "properties": {
        "event": {"const": "run"}, "id": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json",
                 "contentSchema": {"$ref": "#/components/schemas/RunInfo"}},
    },
}  # fmt: skip
_RUN_LOCATION = {"Location": {"schema": {"type": "string"}, "description": "the run"}}


def run_paths() -> dict[str, Any]:
    """The durable agent runs' routes (:mod:`agentq.server.runs`)."""
    paths: dict[str, Any] = {}
    paths["/v1/runs"] = {
        "post": {
            "operationId": "start_run",
            "summary": "Start a durable run of an agent on the user's message",
            "parameters": [{
                "name": "Idempotency-Key", "in": "header", "required": False,
                "description": "the same key with the same body returns the same run "
                               "(200), and the model is not asked again; with another "
                               "body, 422",
                "schema": {"type": "string", "minLength": 1, "maxLength": 200,
                           "pattern": "^[!-~]+$"},
            }],
            "requestBody": json_body("RunStart"),
            "responses": responses(
                {"200": json_response("RunInfo", "the run this Idempotency-Key started before",
                                      _RUN_LOCATION),
                 "201": json_response("RunInfo", "started: its first turn is queued",
                                      _RUN_LOCATION)},
                400, 404, 409, 413, 415, 422,
            ),
        },
        "get": {
            "operationId": "list_runs",
            "parameters": [
                {"name": "status", "in": "query", "required": False,
                 "schema": {"type": "string", "enum": [s.value for s in RunStatus]}},
                {"name": "agent", "in": "query", "required": False,
                 "schema": {"type": "string", "pattern": AGENT_NAME}},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                {"name": "after", "in": "query", "required": False,
                 "description": "the next_after of the previous page",
                 "schema": {"type": "string", "pattern": "^run_[!-~]{1,196}$"}},
            ],
            "responses": responses(
                {"200": json_response("RunList", "a page of runs, newest first")}, 400
            ),
        },
    }  # fmt: skip
    paths["/v1/runs/{run_id}"] = {"get": {
        "operationId": "get_run",
        "parameters": [_run_id_param(), _until_param(), {
            "name": "Prefer", "in": "header", "required": False,
            "description": "wait=N (RFC 7240): answer when the run is idle (or done, "
                           "until=done) or N s passed",
            "schema": {"type": "string"},
        }],
        "responses": responses({"200": json_response("RunInfo", "the run")}, 400, 404, 429),
    }}  # fmt: skip
    paths["/v1/runs/{run_id}/events"] = {"get": {
        "operationId": "run_events",
        "parameters": [_run_id_param(), _until_param()],
        "responses": responses({"200": {
            "description": _RUN_EVENTS_DESCRIPTION,
            "content": {"text/event-stream": {
                "schema": {"anyOf": [{"type": "string"},
                                     {"type": "array", "items": _RUN_SSE_EVENT}]},
                "itemSchema": _RUN_SSE_EVENT,
            }},
        }}, 400, 404, 429),
    }}  # fmt: skip
    paths["/v1/runs/{run_id}:cancel"] = {"post": {
        "operationId": "cancel_run",
        "summary": "Cancel a run: its queued turn and unfinished tool calls are cancelled",
        "parameters": [_run_id_param()],
        "requestBody": json_body("RunCancel", required=False),
        "responses": responses({"200": json_response("RunInfo", "the cancelled run")},
                               400, 404, 409, 413, 415, 422),
    }}  # fmt: skip
    paths["/v1/runs/{run_id}/messages"] = {"post": {
        "operationId": "send_run_message",
        "summary": "Continue a run that answered (succeeded) with the user's next message",
        "parameters": [_run_id_param(), {
            "name": "Idempotency-Key", "in": "header", "required": False,
            "description": "the same key with the same text again appends nothing and "
                           "answers the run as it is (a retry after a lost answer); "
                           "with another text, 422",
            "schema": {"type": "string", "minLength": 1, "maxLength": 200,
                       "pattern": "^[!-~]+$"},
        }],
        "requestBody": json_body("RunMessage"),
        "responses": responses({"200": json_response("RunInfo", "the run, its next turn queued")},
                               400, 404, 409, 413, 415, 422),
    }}  # fmt: skip
    return paths


#: The runs' models in the document's components, each with the JSON Schema mode it is read in.
RUN_MODELS: list[tuple[type[BaseModel], str]] = [
    (RunInfo, "serialization"), (RunList, "serialization"),
    (RunStart, "validation"), (RunMessage, "validation"), (RunCancel, "validation"),
]  # fmt: skip
