"""Approval routes: list, read (with its ``ETag``), approve and reject.

``POST /v1/approvals/{id}:approve`` (or ``:reject``) needs ``If-Match`` with
the approval's ``ETag`` as read: if the approval changed since (escalated,
decided, voided) the answer is 412 and nothing is decided, so a stale screen
cannot approve what it no longer shows. Without ``If-Match`` the answer is 428.
An approve may carry ``args``, the approver's edit of the call (422 if it does
not fit the tool's schema; 403 if the edited call falls under an approval rule
whose approvers do not include the principal).
The decision records the authenticated principal's name, never one from the
request.

Reading needs ``read`` (the approvals of the principal's own tasks), ``approve``
(those it may decide) or ``operate`` (all); others are 404
(:mod:`agentq.server.access`).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentq.approvals import ApprovalInfo, ApprovalStatus
from agentq.server import access
from agentq.server.auth import Scope, require, require_any
from agentq.server.openapi import ApprovalDecision
from agentq.server.problems import Problem, field_errors
from agentq.server.state import read_json, server_state

__all__ = ["etag", "routes"]

_MAX_ID = 200
_ETAG = re.compile(r'"([0-9a-f]{32})"')


def etag(approval: ApprovalInfo) -> str:
    """The approval's ETag header value (a strong entity tag of its version)."""
    return f'"{approval.version}"'


def _if_match(header: str | None) -> str:
    if header is None:
        raise Problem(428, "If-Match required",
                      "send If-Match with the approval's ETag (GET /v1/approvals/{id})",
                      errors=[{"header": "If-Match", "detail": "missing"}])  # fmt: skip
    match = _ETAG.fullmatch(header.strip())
    if match is None:
        raise Problem(400, "If-Match is not an approval's ETag",
                      "send the ETag itself: not '*', a list or a weak tag",
                      errors=[{"header": "If-Match", "detail": "not one strong ETag"}])  # fmt: skip
    return match.group(1)


def _approval_id(request: Request) -> str:
    approval_id: str = request.path_params["approval_id"]
    if len(approval_id) > _MAX_ID:
        raise Problem(404, "Approval not found", "no such approval")
    return approval_id


def _approval_json(approval: ApprovalInfo) -> dict[str, Any]:
    return approval.model_dump(mode="json")


async def list_approvals(request: Request) -> Response:
    state = server_state(request)
    principal = require_any(request, Scope.READ, Scope.APPROVE)
    status = request.query_params.get("status")
    if status is not None and status not in {s.value for s in ApprovalStatus}:
        known = [s.value for s in ApprovalStatus]
        raise Problem(400, "Invalid status", f"status must be one of {known}",
                      errors=[{"parameter": "status", "detail": "unknown status"}])  # fmt: skip
    found = await run_in_threadpool(
        lambda: access.visible_approvals(state.runtime, principal, state.runtime.approvals(status))
    )
    return JSONResponse({"approvals": [_approval_json(a) for a in found]})


async def get_approval(request: Request) -> Response:
    state = server_state(request)
    principal = require_any(request, Scope.READ, Scope.APPROVE)
    approval = await run_in_threadpool(
        access.approval_for, state.runtime, principal, _approval_id(request)
    )
    return JSONResponse(_approval_json(approval), headers={"ETag": etag(approval)})


async def _decide(request: Request, verb: str) -> Response:
    state = server_state(request)
    principal = require(request, Scope.APPROVE)
    approval_id = _approval_id(request)
    version = _if_match(request.headers.get("if-match"))
    body = await read_json(request, optional=True)
    try:
        decision = ApprovalDecision.model_validate(body)
    except ValidationError as exc:
        raise Problem(422, "Invalid request", "the body does not fit",
                      errors=field_errors(exc)) from exc  # fmt: skip
    rt = state.runtime
    if verb == "approve":
        task = await run_in_threadpool(
            lambda: rt.approve(
                approval_id, principal.name, decision.note, if_version=version, args=decision.args
            )
        )
    elif decision.args is not None:
        raise Problem(422, "Invalid request", "only an approval may edit the arguments",
                      errors=[{"pointer": "/args", "detail": "not on :reject"}])  # fmt: skip
    else:
        task = await run_in_threadpool(
            lambda: rt.reject(approval_id, principal.name, decision.note, if_version=version)
        )
    return JSONResponse(task.model_dump(mode="json"))


async def approve(request: Request) -> Response:
    return await _decide(request, "approve")


async def reject(request: Request) -> Response:
    return await _decide(request, "reject")


def routes() -> list[Route]:
    return [
        Route("/v1/approvals", list_approvals, methods=["GET"]),
        Route("/v1/approvals/{approval_id}:approve", approve, methods=["POST"]),
        Route("/v1/approvals/{approval_id}:reject", reject, methods=["POST"]),
        Route("/v1/approvals/{approval_id}", get_approval, methods=["GET"]),
    ]
