"""``POST /v1/tools/{tool}/actions``: enqueue one tool call.

``Idempotency-Key`` follows draft-ietf-httpapi-idempotency-key-header:

* first request with a key → **202** and ``Location: /v1/tasks/{id}``;
* the same key with the same body → **200**, the same task (nothing new runs);
* the same key with a different body → **422** (the task it created is named);
* the same key while its first request is still being processed → **409**
  (within this server process; across processes the database transaction
  still makes one task, and the later request gets 200);
* a tool whose policy says ``require_idempotency_key = true`` and no key → **400**.

A body's ``dedupe_key`` collapses the same call into its key's pending task
(:mod:`agentq.lifecycle.dedupe`): **200** with that task and the header
``Agentq-Collapsed: true``.

Keys are scoped to the principal: two callers' equal keys are different calls
(:func:`stored_name`). The same key with the same arguments but other options
(ordering key, reason, callback URL, dedupe key) is 422 too: the fingerprint is
the whole request. ``Idempotency-Key: ""`` (the empty sf-string) is 400.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentq.errors import IdempotencyConflict, InvalidArguments
from agentq.server.auth import Scope, require
from agentq.server.openapi import action_model_for
from agentq.server.problems import Problem, argument_errors, field_errors
from agentq.server.state import read_json, server_state
from agentq.tools import ToolDef
from agentq.tools.registry import unknown_tool
from agentq.webhooks import check_callback_url

__all__ = ["parse_idempotency_key", "routes", "stored_name"]

_MAX_KEY = 255


def parse_idempotency_key(value: str | None) -> str | None:
    """The key of an ``Idempotency-Key`` header (an sf-string, quotes optional)."""
    if value is None:
        return None
    key = value.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]  # an sf-string; '""' is the empty key, refused below
    if not key or len(key) > _MAX_KEY or not all(33 <= ord(c) <= 126 for c in key):
        raise Problem(400, "Invalid Idempotency-Key", f"1 to {_MAX_KEY} visible ASCII characters",
                      errors=[{"header": "Idempotency-Key", "detail": "invalid key"}])  # fmt: skip
    return key


def stored_name(principal: str) -> str:
    """The principal's name as the first part of a stored key: ``:`` (which names
    may hold) escaped as ``%3A`` (which they may not), so ``bot:eu`` with key
    ``42`` and ``bot`` with key ``eu:42`` are different keys. Names without ``:``
    are unchanged (their keys stay what they were)."""
    return principal.replace(":", "%3A")


def _body_errors(exc: ValidationError, definition: ToolDef, body: Any) -> list[dict[str, str]]:
    """The body's errors as JSON Pointers; those of ``args`` as the tool's own check
    words them (a misspelled name with its "did you mean", even when the name it
    misspells is a required one: pydantic says only "Field required")."""
    errors = field_errors(exc)
    args = body.get("args") if isinstance(body, dict) else None
    if not isinstance(args, dict) or not any(e["pointer"].startswith("/args/") for e in errors):
        return errors
    try:
        definition.enqueueable_args(args)
    except InvalidArguments as refused:
        if refused.problems:
            rest = [e for e in errors if not e["pointer"].startswith("/args")]
            return rest + argument_errors(refused)
    return errors


def _task_response(task: Any, status: int, collapsed: bool = False) -> Response:
    headers = {"Location": f"/v1/tasks/{task.task_id}"}
    if collapsed:
        headers["Agentq-Collapsed"] = "true"
    return JSONResponse(task.model_dump(mode="json"), status_code=status, headers=headers)


async def enqueue(request: Request) -> Response:
    state = server_state(request)
    principal = require(request, Scope.ENQUEUE)
    rt = state.runtime
    name = request.path_params["tool"]
    tools = await run_in_threadpool(rt.known_tools)  # a runtime without tools reads them
    if name not in tools or rt.is_internal(name) or not tools.get(name).visible:
        exposed = [t.name for t in sorted(tools, key=lambda t: t.name)
                   if t.visible and not t.internal and not rt.is_internal(t.name)]  # fmt: skip
        raise Problem(404, "Unknown tool", unknown_tool(name, exposed, "tools exposed here"))
    definition = tools.get(name)
    key = parse_idempotency_key(request.headers.get("idempotency-key"))
    if key is None and rt.policy.for_tool(name).require_idempotency_key:
        raise Problem(400, "Idempotency-Key required", f"tool {name!r} requires one by policy",
                      errors=[{"header": "Idempotency-Key", "detail": "missing"}])  # fmt: skip
    body = await read_json(request)
    try:
        action = action_model_for(rt, definition).model_validate(body)
    except ValidationError as exc:
        raise Problem(422, "Invalid request", f"the body does not fit tool {name!r}",
                      errors=_body_errors(exc, definition, body)) from exc  # fmt: skip
    fields: dict[str, Any] = action.model_dump()
    if fields["callback_url"] is not None:
        try:
            check_callback_url(fields["callback_url"], rt.policy)
        except InvalidArguments as exc:
            errors = [{"pointer": "/callback_url", "detail": str(exc)}]
            raise Problem(422, "Invalid callback_url", str(exc), errors=errors) from exc
    owner = stored_name(principal.name)
    stored_key = None if key is None else f"http:{owner}:{key}"
    if stored_key is not None and stored_key in state.in_flight:
        raise Problem(409, "Request in progress",
                      "the first request with this Idempotency-Key is still being processed",
                      errors=[{"header": "Idempotency-Key", "detail": "in progress"}])  # fmt: skip
    if stored_key is not None:
        state.in_flight.add(stored_key)
    try:
        submitted = await run_in_threadpool(
            rt.submit, name, body["args"], idempotency_key=stored_key,
            ordering_key=fields["ordering_key"], reason=fields["reason"],
            callback_url=fields["callback_url"], by=principal.name,
            dedupe_key=None if fields["dedupe_key"] is None
            else f"http:{owner}:{fields['dedupe_key']}",
        )  # fmt: skip
    except IdempotencyConflict as exc:
        detail = str(exc).replace(repr(stored_key), repr(key))  # the caller's key, not ours
        errors = [{"header": "Idempotency-Key", "detail": "reused with another body"}]
        raise Problem(422, "Idempotency-Key reused with another request", detail,
                      errors=errors) from exc  # fmt: skip
    except InvalidArguments as exc:
        raise Problem(422, "Invalid request", str(exc), errors=argument_errors(exc)) from exc
    finally:
        if stored_key is not None:
            state.in_flight.discard(stored_key)
    return _task_response(submitted.task, 202 if submitted.created else 200, submitted.collapsed)


def routes() -> list[Route]:
    return [Route("/v1/tools/{tool}/actions", enqueue, methods=["POST"])]
